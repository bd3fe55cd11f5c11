//===- ServeBench.cpp - `infer bench --base-url`, a serving client --------===//
//
// Each request is one connection of an asynchronous Boost.Beast client (a
// few io threads for any number of streams): POST /v1/completions with the
// prompt as token ids, stream=true and continuous usage stats, so each
// server-sent event says how many tokens the request has; the time of each
// event that adds tokens gives TTFT, ITL and TPOT as the offline bench
// measures them.
//
//===----------------------------------------------------------------------===//

#include "tools/infer/ServeBench.h"

#include "runtime/engine/Engine.h"
#include "tools/infer/Model.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace infer::tool {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

struct Timeline {
  double start = 0.0;
  double firstToken = -1.0;
  double finish = 0.0;
  std::vector<double> tokenTimes;
  int64_t numOutputTokens = 0;
  bool ok = false;
  std::string error;
};

struct Url {
  std::string host;
  std::string port;
  std::string prefix;
};

StatusOr<Url> parseUrl(const std::string &text) {
  const std::string scheme = "http://";
  if (text.rfind(scheme, 0) != 0)
    return invalidArgument("--base-url must start with http:// (got '" + text +
                           "')");
  std::string rest = text.substr(scheme.size());
  Url url;
  const size_t slash = rest.find('/');
  std::string authority = rest.substr(0, slash);
  url.prefix = slash == std::string::npos ? "" : rest.substr(slash);
  while (!url.prefix.empty() && url.prefix.back() == '/')
    url.prefix.pop_back();
  // Both http://host:port (vLLM's bench) and the SDKs' .../v1 work.
  if (url.prefix.size() >= 3 &&
      url.prefix.compare(url.prefix.size() - 3, 3, "/v1") == 0)
    url.prefix.resize(url.prefix.size() - 3);
  const size_t colon = authority.rfind(':');
  url.host = authority.substr(0, colon);
  url.port = colon == std::string::npos ? "80" : authority.substr(colon + 1);
  if (url.host.empty())
    return invalidArgument("--base-url has no host");
  return url;
}

/// One streamed completion on its own connection.
class StreamClient : public std::enable_shared_from_this<StreamClient> {
public:
  StreamClient(net::io_context &ioc, const tcp::resolver::results_type &ep,
               std::string request, Timeline &timeline,
               std::function<double()> now, std::function<void()> done)
      : stream_(net::make_strand(ioc)), endpoints_(ep),
        request_(std::move(request)), timeline_(timeline), now_(std::move(now)),
        done_(std::move(done)) {}

  void start() {
    timeline_.start = now_();
    stream_.async_connect(endpoints_,
                          [self = shared_from_this()](beast::error_code ec,
                                                      const tcp::endpoint &) {
                            if (ec)
                              return self->fail("connect: " + ec.message());
                            self->send();
                          });
  }

private:
  void send() {
    net::async_write(stream_, net::buffer(request_),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec)
                         return self->fail("write: " + ec.message());
                       self->read();
                     });
  }

  void read() {
    stream_.async_read_some(
        net::buffer(chunk_),
        [self = shared_from_this()](beast::error_code ec, size_t n) {
          if (n)
            self->consume(std::string_view(self->chunk_, n));
          if (self->finished_)
            return;
          if (ec)
            return self->fail("read: " + ec.message());
          self->read();
        });
  }

  /// Bytes of the response: the head, then chunks of SSE events.
  void consume(std::string_view bytes) {
    raw_.append(bytes.data(), bytes.size());
    if (!sawHead_) {
      const size_t end = raw_.find("\r\n\r\n");
      if (end == std::string::npos)
        return;
      const std::string status = raw_.substr(0, raw_.find("\r\n"));
      if (status.find(" 200 ") == std::string::npos) {
        fail("HTTP " + status + ": " + raw_.substr(end + 4, 300));
        return;
      }
      sawHead_ = true;
      raw_.erase(0, end + 4);
    }
    while (!finished_) {
      const size_t line = raw_.find("\r\n");
      if (line == std::string::npos)
        return;
      const size_t size =
          std::strtoul(raw_.substr(0, line).c_str(), nullptr, 16);
      if (raw_.size() < line + 2 + size + 2)
        return;
      events_ += raw_.substr(line + 2, size);
      raw_.erase(0, line + 2 + size + 2);
      if (size == 0) {
        finish();
        return;
      }
      size_t split;
      while ((split = events_.find("\n\n")) != std::string::npos) {
        event(events_.substr(0, split));
        events_.erase(0, split + 2);
      }
    }
  }

  void event(const std::string &text) {
    if (text.rfind("data: ", 0) != 0)
      return;
    const std::string payload = text.substr(6);
    if (payload == "[DONE]")
      return;
    nlohmann::json j = nlohmann::json::parse(payload, nullptr, false);
    if (j.is_discarded() || j.contains("error")) {
      fail("error event: " + payload.substr(0, 300));
      return;
    }
    int64_t tokens = timeline_.numOutputTokens;
    if (j.contains("usage") && j["usage"].is_object())
      tokens = j["usage"].value("completion_tokens", tokens);
    else if (j.contains("choices") && !j["choices"].empty())
      ++tokens; // A server without usage per chunk: a chunk per token.
    if (tokens > timeline_.numOutputTokens) {
      const double t = now_();
      if (timeline_.firstToken < 0)
        timeline_.firstToken = t;
      timeline_.tokenTimes.push_back(t);
      timeline_.numOutputTokens = tokens;
    }
  }

  void finish() {
    finished_ = true;
    timeline_.finish = now_();
    timeline_.ok = timeline_.numOutputTokens > 0;
    if (!timeline_.ok)
      timeline_.error = "no tokens";
    close();
  }

  void fail(const std::string &message) {
    if (finished_)
      return;
    finished_ = true;
    timeline_.finish = now_();
    timeline_.error = message;
    close();
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.close();
    done_();
  }

  beast::tcp_stream stream_;
  tcp::resolver::results_type endpoints_;
  std::string request_;
  Timeline &timeline_;
  std::function<double()> now_;
  std::function<void()> done_;
  char chunk_[16384];
  std::string raw_;
  std::string events_;
  bool sawHead_ = false;
  bool finished_ = false;
};

double quantile(std::vector<double> values, double q) {
  if (values.empty())
    return 0.0;
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] +
         (values[hi] - values[lo]) * (pos - static_cast<double>(lo));
}

nlohmann::ordered_json latencyStats(const std::vector<double> &seconds) {
  double sum = 0.0;
  for (double v : seconds)
    sum += v;
  return {{"mean", seconds.empty() ? 0.0 : sum / seconds.size() * 1e3},
          {"p50", quantile(seconds, 0.5) * 1e3},
          {"p99", quantile(seconds, 0.99) * 1e3}};
}

/// A blocking GET of `path`; the body.
StatusOr<std::string> httpGet(const Url &url, const std::string &path) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec)
    return invalidArgument("cannot resolve " + url.host + ": " + ec.message());
  tcp::socket socket(ioc);
  net::connect(socket, endpoints, ec);
  if (ec)
    return invalidArgument("cannot connect to " + url.host + ":" + url.port +
                           ": " + ec.message());
  const std::string request = "GET " + url.prefix + path +
                              " HTTP/1.1\r\nHost: " + url.host +
                              "\r\nConnection: close\r\n\r\n";
  net::write(socket, net::buffer(request), ec);
  std::string response;
  char buf[4096];
  size_t n;
  while ((n = socket.read_some(net::buffer(buf), ec)) > 0 || !ec)
    response.append(buf, n);
  const size_t body = response.find("\r\n\r\n");
  if (body == std::string::npos || response.find(" 200 ") > body)
    return invalidArgument("GET " + path +
                           " failed: " + response.substr(0, 200));
  return response.substr(body + 4);
}

} // namespace

Status runServeBench(const ParsedArgs &args) {
  INFER_ASSIGN_OR_RETURN(Url url, parseUrl(*args.get("--base-url")));
  INFER_ASSIGN_OR_RETURN(int64_t inputLen, args.getInt("--input-len", 128));
  INFER_ASSIGN_OR_RETURN(int64_t outputLen, args.getInt("--output-len", 128));
  INFER_ASSIGN_OR_RETURN(int64_t numPrompts, args.getInt("--num-prompts", 64));
  INFER_ASSIGN_OR_RETURN(double rate,
                         args.getDouble("--request-rate", INFINITY));
  INFER_ASSIGN_OR_RETURN(int64_t seed, args.getInt("--seed", 0));
  INFER_ASSIGN_OR_RETURN(int64_t maxConcurrency,
                         args.getInt("--max-concurrency", 0));
  if (inputLen <= 0 || outputLen <= 0 || numPrompts <= 0)
    return invalidArgument(
        "--input-len, --output-len and --num-prompts must be > 0");
  if (!(rate > 0))
    return invalidArgument("--request-rate must be > 0 (inf: all at once)");
  if (maxConcurrency < 0)
    return invalidArgument("--max-concurrency must be >= 0 (0: unbounded)");
  // --goodput ttft:MS,tpot:MS,e2el:MS: requests meeting every SLO.
  double sloTtft = INFINITY, sloTpot = INFINITY, sloE2e = INFINITY;
  if (args.has("--goodput")) {
    std::string spec = *args.get("--goodput");
    for (char &c : spec)
      if (c == ',')
        c = ' ';
    std::istringstream in(spec);
    std::string item;
    while (in >> item) {
      const size_t colon = item.find(':');
      const std::string key = item.substr(0, colon);
      const double ms = colon == std::string::npos
                            ? -1
                            : std::strtod(item.c_str() + colon + 1, nullptr);
      if (!(ms > 0) || (key != "ttft" && key != "tpot" && key != "e2el"))
        return invalidArgument("--goodput takes ttft:MS, tpot:MS and e2el:MS "
                               "(got '" +
                               item + "')");
      (key == "ttft" ? sloTtft : key == "tpot" ? sloTpot : sloE2e) = ms / 1e3;
    }
  }

  // The vocabulary: --vocab-size, else MODEL's.
  int64_t vocab = 0;
  if (args.has("--vocab-size")) {
    INFER_ASSIGN_OR_RETURN(vocab, args.getInt("--vocab-size", 0));
  } else if (args.positional.size() == 1) {
    INFER_ASSIGN_OR_RETURN(LoadedModel model, loadModel(args.positional[0]));
    vocab = engineConfigFor(model.artifact).vocabSize;
  } else {
    return invalidArgument("--base-url needs MODEL or --vocab-size (the "
                           "range of the random prompt ids)");
  }
  if (vocab <= 0)
    return invalidArgument("--vocab-size must be > 0");
  std::string modelName = args.get("--served-model-name", "");
  if (modelName.empty()) {
    INFER_ASSIGN_OR_RETURN(std::string models, httpGet(url, "/v1/models"));
    nlohmann::json j = nlohmann::json::parse(models, nullptr, false);
    if (j.is_discarded() || !j.contains("data") || j["data"].empty())
      return invalidArgument("GET /v1/models: no model in " +
                             models.substr(0, 200));
    modelName = j["data"][0].value("id", "");
  }

  // The workload of the offline bench: the same prompts for the same seed.
  std::mt19937_64 rng(static_cast<uint64_t>(seed));
  std::vector<std::string> requests;
  std::vector<double> arrivals;
  double arrival = 0.0;
  for (int64_t r = 0; r < numPrompts; ++r) {
    std::vector<int32_t> prompt;
    for (int64_t i = 0; i < inputLen; ++i)
      prompt.push_back(static_cast<int32_t>(rng() % vocab));
    arrivals.push_back(arrival);
    if (std::isfinite(rate))
      arrival += std::exponential_distribution<double>(rate)(rng);
    nlohmann::json body{
        {"model", modelName},
        {"prompt", prompt},
        {"max_tokens", outputLen},
        {"temperature", 0},
        {"ignore_eos", true},
        {"stream", true},
        {"stream_options",
         {{"include_usage", true}, {"continuous_usage_stats", true}}}};
    const std::string data = body.dump();
    requests.push_back(
        "POST " + url.prefix + "/v1/completions HTTP/1.1\r\nHost: " + url.host +
        "\r\nContent-Type: application/json\r\nContent-Length: " +
        std::to_string(data.size()) + "\r\nConnection: close\r\n\r\n" + data);
  }

  net::io_context ioc;
  auto work = net::make_work_guard(ioc);
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(url.host, url.port, ec);
  if (ec)
    return invalidArgument("cannot resolve " + url.host + ": " + ec.message());
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i)
    threads.emplace_back([&ioc] { ioc.run(); });

  const Clock::time_point start = Clock::now();
  auto now = [start] {
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  std::vector<Timeline> timelines(static_cast<size_t>(numPrompts));
  std::mutex mutex;
  std::condition_variable changed;
  int64_t inFlight = 0, numDone = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    std::this_thread::sleep_for(
        std::chrono::duration<double>(std::max(0.0, arrivals[r] - now())));
    {
      std::unique_lock<std::mutex> lock(mutex);
      changed.wait(lock, [&] {
        return maxConcurrency == 0 || inFlight < maxConcurrency;
      });
      ++inFlight;
    }
    std::make_shared<StreamClient>(ioc, endpoints, requests[r], timelines[r],
                                   now,
                                   [&] {
                                     std::lock_guard<std::mutex> lock(mutex);
                                     --inFlight;
                                     ++numDone;
                                     changed.notify_all();
                                   })
        ->start();
  }
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return numDone == numPrompts; });
  }
  const double duration = now();
  work.reset();
  ioc.stop();
  for (std::thread &t : threads)
    t.join();

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t outputTokens = 0, completed = 0, good = 0;
  std::string firstError;
  for (const Timeline &t : timelines) {
    if (!t.ok) {
      if (firstError.empty())
        firstError = t.error;
      continue;
    }
    ++completed;
    outputTokens += t.numOutputTokens;
    ttft.push_back(t.firstToken - t.start);
    e2e.push_back(t.finish - t.start);
    double requestTpot = 0.0;
    if (t.numOutputTokens > 1) {
      requestTpot = (t.finish - t.firstToken) /
                    static_cast<double>(t.numOutputTokens - 1);
      tpot.push_back(requestTpot);
    }
    for (size_t i = 1; i < t.tokenTimes.size(); ++i)
      itl.push_back(t.tokenTimes[i] - t.tokenTimes[i - 1]);
    good += ttft.back() <= sloTtft && requestTpot <= sloTpot &&
            e2e.back() <= sloE2e;
  }
  if (completed == 0)
    return invalidArgument("no request completed; the first error: " +
                           firstError);
  const double inputTokens = static_cast<double>(completed * inputLen);
  nlohmann::ordered_json result{
      {"base_url", *args.get("--base-url")},
      {"model", modelName},
      {"num_prompts", numPrompts},
      {"completed", completed},
      {"failed", numPrompts - completed},
      {"input_len", inputLen},
      {"output_len", outputLen},
      {"request_rate", std::isfinite(rate) ? nlohmann::ordered_json(rate)
                                           : nlohmann::ordered_json("inf")},
      {"max_concurrency", maxConcurrency},
      {"duration_s", duration},
      {"request_throughput", completed / duration},
      {"output_throughput", outputTokens / duration},
      {"total_token_throughput", (inputTokens + outputTokens) / duration},
      {"request_goodput", good / duration},
      {"ttft_ms", latencyStats(ttft)},
      {"tpot_ms", latencyStats(tpot)},
      {"itl_ms", latencyStats(itl)},
      {"e2el_ms", latencyStats(e2e)}};
  if (args.has("--json")) {
    std::cout << result.dump(-1, ' ', false,
                             nlohmann::ordered_json::error_handler_t::replace)
              << "\n";
  } else {
    char line[256];
    std::snprintf(line, sizeof(line),
                  "%s (%s): %lld requests (%lld failed), input %lld, output "
                  "%lld tokens, request rate %s, max concurrency %lld\n",
                  args.get("--base-url")->c_str(), modelName.c_str(),
                  static_cast<long long>(numPrompts),
                  static_cast<long long>(numPrompts - completed),
                  static_cast<long long>(inputLen),
                  static_cast<long long>(outputLen),
                  std::isfinite(rate) ? std::to_string(rate).c_str() : "inf",
                  static_cast<long long>(maxConcurrency));
    std::cout << line;
    std::snprintf(line, sizeof(line),
                  "duration %.3f s\nthroughput: %.3f req/s, %.2f output "
                  "tok/s, %.2f total tok/s; goodput %.3f req/s\n",
                  duration, completed / duration, outputTokens / duration,
                  (inputTokens + outputTokens) / duration, good / duration);
    std::cout << line;
    for (const auto &[name, key] :
         std::vector<std::pair<const char *, const char *>>{
             {"TTFT", "ttft_ms"},
             {"TPOT", "tpot_ms"},
             {"ITL", "itl_ms"},
             {"E2EL", "e2el_ms"}}) {
      std::snprintf(
          line, sizeof(line), "%-5s ms: mean %9.2f  p50 %9.2f  p99 %9.2f\n",
          name, result[key]["mean"].get<double>(),
          result[key]["p50"].get<double>(), result[key]["p99"].get<double>());
      std::cout << line;
    }
    if (!firstError.empty())
      std::cout << "first error: " << firstError << "\n";
  }
  std::cout.flush();
  return Status::ok();
}

} // namespace infer::tool
