//===- Scheduler.cpp - Token-budget continuous batching -------------------===//

#include "runtime/engine/Scheduler.h"

#include <algorithm>
#include <tuple>

namespace infer {

namespace {

/// Tokens a request has to compute before it can sample again (excluding
/// draft tokens): 1 while decoding, more while (re)computing a prompt.
int64_t pendingTokens(const Request &r) {
  return r.numTokens() - r.numComputedTokens;
}

bool isDecoding(const Request &r) { return pendingTokens(r) <= 1; }

} // namespace

bool Scheduler::waitsToFitWhole(int64_t pending, int64_t budget) const {
  return !config_.enableChunkedPrefill && pending > budget &&
         pending <= config_.maxNumBatchedTokens;
}

Scheduler::Scheduler(const SchedulerConfig &config, KVCacheManager &kvCache)
    : config_(config), kvCache_(kvCache) {}

bool Scheduler::before(const Request *a, const Request *b) const {
  if (config_.policy == SchedulingPolicy::kPriority &&
      a->priority != b->priority)
    return a->priority < b->priority;
  return std::tie(a->arrivalTime, a->id) < std::tie(b->arrivalTime, b->id);
}

void Scheduler::enqueueWaiting(Request *request) {
  request->status = RequestStatus::kWaiting;
  // Arrivals come in order (one comparison); a preempted request goes back
  // near the front.
  auto at = std::upper_bound(
      waiting_.begin(), waiting_.end(), request,
      [this](const Request *a, const Request *b) { return before(a, b); });
  waiting_.insert(at, request);
}

void Scheduler::addRequest(Request *request) { enqueueWaiting(request); }

void Scheduler::addRunning(Request *request) {
  request->status = RequestStatus::kRunning;
  running_.push_back(request);
}

void Scheduler::preempt(Request *request, SchedulerOutput &out) {
  running_.erase(std::find(running_.begin(), running_.end(), request));
  kvCache_.free(request->id);
  request->numComputedTokens = 0;
  request->draftTokens.clear();
  ++request->numPreemptions;
  ++numPreemptions_;
  enqueueWaiting(request);
  out.preempted.push_back(request->id);
}

void Scheduler::scheduleRunning(SchedulerOutput &out, int64_t &budget,
                                bool decodes, bool prefills, bool &preempted) {
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Request *r = running_[i];
    const int64_t pending = pendingTokens(*r);
    // A request whose pending token (asynchronous scheduling) fills its
    // length ends when the token arrives: nothing more to compute.
    if ((r->hasPendingToken() && r->numTokens() >= r->maxTotalTokens) ||
        !(isDecoding(*r) ? decodes : prefills) ||
        waitsToFitWhole(pending, budget)) {
      ++i;
      continue;
    }
    // Drafts only ride along when the rest fits the budget.
    int64_t numTokens = std::min(pending, budget);
    const int64_t room = budget - numTokens;
    if (numTokens < pending || room <= 0)
      r->draftTokens.clear();
    else if (static_cast<int64_t>(r->draftTokens.size()) > room)
      r->draftTokens.resize(room);
    numTokens += static_cast<int64_t>(r->draftTokens.size());

    bool allocated = false;
    while (!(allocated =
                 kvCache_.allocateSlots(r->id, r->numComputedTokens, numTokens,
                                        nullptr, out.blockCopies))) {
      // Drafts are guesses: they give way before any request does (a
      // preempted request recomputes; one alone would end for them).
      if (!r->draftTokens.empty()) {
        numTokens -= static_cast<int64_t>(r->draftTokens.size());
        r->draftTokens.clear();
        continue;
      }
      if (running_.size() == 1) {
        // Alone and still out of blocks: it can never grow, so it ends.
        running_.clear();
        kvCache_.free(r->id);
        r->status = RequestStatus::kFinished;
        r->finishReason = FinishReason::kLength;
        r->draftTokens.clear();
        out.finished.push_back(r);
        break;
      }
      Request *victim = running_.back();
      preempt(victim, out);
      preempted = true;
      if (victim == r)
        break;
    }
    if (!allocated)
      continue;
    out.scheduled.push_back(
        {r, numTokens, static_cast<int64_t>(r->draftTokens.size())});
    budget -= numTokens;
    ++i;
  }
}

void Scheduler::scheduleWaiting(SchedulerOutput &out, int64_t &budget) {
  while (!waiting_.empty() && budget > 0 &&
         static_cast<int64_t>(running_.size()) < config_.maxNumSeqs) {
    Request *r = waiting_.front();
    CachedPrefix prefix = kvCache_.findCachedPrefix(r->tokens);
    const int64_t pending = r->numTokens() - prefix.numTokens;
    if (waitsToFitWhole(pending, budget))
      break;
    const int64_t numTokens = std::min(pending, budget);
    // Under the priority policy a waiting request displaces running ones
    // of lower priority, even those already scheduled this step.
    bool allocated = false;
    while (
        !(allocated = kvCache_.allocateSlots(r->id, prefix.numTokens, numTokens,
                                             &prefix, out.blockCopies))) {
      if (config_.policy != SchedulingPolicy::kPriority || running_.empty())
        break;
      Request *victim = *std::max_element(
          running_.begin(), running_.end(),
          [this](const Request *a, const Request *b) { return before(a, b); });
      if (!before(r, victim))
        break;
      auto it = std::find_if(
          out.scheduled.begin(), out.scheduled.end(),
          [victim](const ScheduledRequest &s) { return s.request == victim; });
      if (it != out.scheduled.end()) {
        budget += it->numTokens;
        out.scheduled.erase(it);
      }
      preempt(victim, out);
    }
    if (!allocated) {
      if (!running_.empty() || !out.scheduled.empty() ||
          kvCache_.numFreeBlocks() < kvCache_.numBlocks())
        break;
      // Even an empty pool cannot hold it (a resumed request that grew
      // past the pool): it ends with what it has.
      waiting_.pop_front();
      r->status = RequestStatus::kFinished;
      r->finishReason = FinishReason::kLength;
      out.finished.push_back(r);
      continue;
    }
    waiting_.pop_front();
    r->numComputedTokens = prefix.numTokens;
    if (r->numCachedPromptTokens < 0)
      r->numCachedPromptTokens = prefix.numTokens;
    numCachedTokens_ += prefix.numTokens;
    numQueriedTokens_ += r->numTokens();
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    out.scheduled.push_back({r, numTokens, 0});
    budget -= numTokens;
  }
}

SchedulerOutput Scheduler::schedule() {
  std::stable_sort(
      running_.begin(), running_.end(),
      [this](const Request *a, const Request *b) { return before(a, b); });
  bool decodes = true, prefills = true;
  if (config_.prefillRatio > 0) {
    int64_t numDecoding = 0;
    for (const Request *r : running_)
      numDecoding += isDecoding(*r);
    const int64_t numPrefilling =
        static_cast<int64_t>(running_.size() + waiting_.size()) - numDecoding;
    prefills =
        numDecoding == 0 || static_cast<double>(numPrefilling) / numDecoding >=
                                config_.prefillRatio;
    decodes = !prefills;
  }

  SchedulerOutput out;
  // Admitting new work right after preempting would only thrash.
  bool preempted = false;
  for (int attempt = 0; attempt < 2; ++attempt) {
    int64_t budget = config_.maxNumBatchedTokens;
    scheduleRunning(out, budget, decodes, prefills, preempted);
    if (prefills && !preempted)
      scheduleWaiting(out, budget);
    // A one-kind step with nothing of its kind runs the other kind, also
    // when its kind only preempted or ended requests: the prefills that
    // cannot grow would otherwise win every step while the decodes that
    // hold the blocks they need never run.
    if (!out.scheduled.empty() || config_.prefillRatio <= 0)
      break;
    decodes = !decodes;
    prefills = !prefills;
  }
  for (const ScheduledRequest &s : out.scheduled)
    out.numScheduledTokens += s.numTokens;
  return out;
}

void Scheduler::setComputed(Request &request, int64_t numComputedTokens) {
  request.numComputedTokens = numComputedTokens;
  kvCache_.truncate(request.id, numComputedTokens);
  kvCache_.cacheFullBlocks(request.id, request.tokens, numComputedTokens);
}

void Scheduler::finish(Request &request, FinishReason reason) {
  // Only the queue the request is in is searched (a long waiting queue is
  // not scanned for every finished running request).
  auto drop = [&request](auto &queue) {
    queue.erase(std::remove(queue.begin(), queue.end(), &request), queue.end());
  };
  if (request.status != RequestStatus::kRunning)
    drop(waiting_);
  if (request.status != RequestStatus::kWaiting)
    drop(running_);
  kvCache_.free(request.id);
  request.draftTokens.clear();
  request.status = RequestStatus::kFinished;
  request.finishReason = reason;
}

} // namespace infer
