//===- Serve.cpp - `infer serve`, the OpenAI-compatible server ------------===//
//
// Loads MODEL, builds the engine with bench's engine and backend options,
// puts it behind an AsyncEngine and serves the OpenAI API over HTTP until
// SIGINT or SIGTERM; then it stops accepting, lets in-flight requests
// finish within --shutdown-timeout and exits 0.
//
//===----------------------------------------------------------------------===//

#include "tools/infer/Serve.h"

#include "runtime/engine/Engine.h"
#include "runtime/serving/AsyncEngine.h"
#include "runtime/serving/HttpServer.h"
#include "runtime/serving/OpenAiServer.h"
#include "runtime/serving/chat/ChatTemplate.h"
#include "tools/infer/Model.h"
#include "tools/infer/Speculation.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <sys/resource.h>
#include <thread>

namespace infer::tool {

const char *const kServeHelp =
    "usage: infer serve MODEL [--host 127.0.0.1] [--port 8000]\n"
    "           [--api-key KEY] [--served-model-name NAME]\n"
    "           [--max-queued-requests N] [--shutdown-timeout S]\n"
    "           [--chat-template FILE] [--no-chat-page] [--http-threads 2]\n"
    "           [--max-body-bytes 4194304] [--request-timeout 30]\n"
    "           [--backend cpu|cuda] [--weights DIR] [--skip-weight-check] "
    "[--threads N]\n"
    "           [--num-blocks N | --gpu-memory-utilization F]\n"
    "           [--max-num-seqs auto|N] [--max-num-batched-tokens auto|N]\n"
    "           [--no-prefix-caching] [--no-async-scheduling]\n"
    "           [--scheduling-policy fcfs|priority]\n"
    "           [--draft MODEL | --ngram-speculation]\n"
    "           [--num-speculative-tokens 4] [--adaptive-speculation]\n\n"
    "Serves MODEL (an artifact or a Hugging Face model directory) over\n"
    "HTTP with OpenAI's API: POST /v1/completions and /v1/chat/completions\n"
    "(whole or streamed as server-sent events), GET /v1/models, GET /health\n"
    "(503 once the engine failed), GET /metrics (Prometheus), POST\n"
    "/tokenize and /detokenize. Listens on 127.0.0.1 unless --host says.\n"
    "GET / is a chat page (streaming chat completions in the browser;\n"
    "--no-chat-page answers 404 there instead).\n"
    "--api-key (or INFER_API_KEY) requires \"Authorization: Bearer KEY\" on\n"
    "every endpoint but /health, /metrics and the page (which asks for the\n"
    "key). --served-model-name (default: the MODEL directory's name) is\n"
    "the model clients name.\n"
    "--max-queued-requests N (default 1024) answers 429 with Retry-After\n"
    "once N requests wait for the engine. Chat completions render the\n"
    "tokenizer's chat_template, or --chat-template FILE (a Jinja file).\n"
    "--http-threads io threads serve every connection. A request must\n"
    "arrive whole within --request-timeout seconds (the idle limit of a\n"
    "kept-alive connection too) and its body stay under --max-body-bytes\n"
    "(413). SIGINT or SIGTERM stops accepting, lets in-flight requests\n"
    "finish for up to --shutdown-timeout seconds (default 30), aborts the\n"
    "rest and exits 0. The KV pool has --num-blocks blocks (cpu default\n"
    "2048) or, on cuda, --gpu-memory-utilization F (default 0.9) of the\n"
    "memory free after the weights; --max-num-seqs (auto: 1024 on cuda,\n"
    "256 on cpu) and --max-num-batched-tokens (auto: 8192 on cuda, 2048 on\n"
    "cpu) bound each step. --scheduling-policy priority runs requests of lower "
    "\"priority\"\n"
    "first (ties by arrival; default fcfs). The engine schedules and packs\n"
    "step N+1 while the device runs step N (--no-async-scheduling waits for\n"
    "each step's tokens first). Speculative decoding options are\n"
    "generate's.\n";

std::vector<OptionSpec> serveOptions() {
  std::vector<OptionSpec> options = {{"--host"},
                                     {"--port"},
                                     {"--api-key"},
                                     {"--served-model-name"},
                                     {"--max-queued-requests"},
                                     {"--shutdown-timeout"},
                                     {"--chat-template"},
                                     {"--no-chat-page", false},
                                     {"--http-threads"},
                                     {"--max-body-bytes"},
                                     {"--request-timeout"},
                                     {"--backend"},
                                     {"--weights"},
                                     {"--skip-weight-check", false},
                                     {"--threads"},
                                     {"--num-blocks"},
                                     {"--gpu-memory-utilization"},
                                     {"--max-num-seqs"},
                                     {"--max-num-batched-tokens"},
                                     {"--no-prefix-caching", false},
                                     {"--no-async-scheduling", false},
                                     {"--scheduling-policy"}};
  for (const OptionSpec &s : speculationOptions())
    options.push_back(s);
  return options;
}

namespace {

/// Lets the process hold many connections: the soft descriptor limit goes
/// up to the hard one.
void raiseFileLimit() {
  struct rlimit limit;
  if (getrlimit(RLIMIT_NOFILE, &limit) == 0 &&
      limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    (void)setrlimit(RLIMIT_NOFILE, &limit);
  }
}

StatusOr<std::string> readFile(const std::string &path) {
  std::ifstream in(path);
  if (!in)
    return notFound("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

} // namespace

Status runServe(const ParsedArgs &args) {
  if (args.positional.size() != 1)
    return invalidArgument("expected MODEL (see --help)");
  const std::string modelPath = args.positional[0];
  serving::HttpServerOptions http;
  http.host = args.get("--host", "127.0.0.1");
  INFER_ASSIGN_OR_RETURN(int64_t port, args.getInt("--port", 8000));
  INFER_ASSIGN_OR_RETURN(int64_t httpThreads, args.getInt("--http-threads", 2));
  INFER_ASSIGN_OR_RETURN(int64_t maxBody,
                         args.getInt("--max-body-bytes", 4 << 20));
  INFER_ASSIGN_OR_RETURN(http.requestTimeoutSeconds,
                         args.getDouble("--request-timeout", 30.0));
  INFER_ASSIGN_OR_RETURN(int64_t maxQueued,
                         args.getInt("--max-queued-requests", 1024));
  INFER_ASSIGN_OR_RETURN(double shutdownTimeout,
                         args.getDouble("--shutdown-timeout", 30.0));
  if (port < 0 || port > 65535)
    return invalidArgument("--port must be in [0, 65535]");
  if (httpThreads < 1 || httpThreads > 256)
    return invalidArgument("--http-threads must be in [1, 256]");
  if (maxBody < 1)
    return invalidArgument("--max-body-bytes must be > 0");
  if (!(http.requestTimeoutSeconds > 0))
    return invalidArgument("--request-timeout must be > 0");
  if (maxQueued < 0)
    return invalidArgument("--max-queued-requests must be >= 0");
  if (!(shutdownTimeout >= 0))
    return invalidArgument("--shutdown-timeout must be >= 0");
  http.port = static_cast<int>(port);
  http.numThreads = static_cast<int>(httpThreads);
  http.maxBodyBytes = static_cast<size_t>(maxBody);

  serving::OpenAiServerOptions api;
  api.apiKey = args.get("--api-key", "");
  api.chatPage = !args.has("--no-chat-page");
  if (api.apiKey.empty())
    if (const char *key = std::getenv("INFER_API_KEY"))
      api.apiKey = key;
  api.servedModelName = args.get(
      "--served-model-name",
      std::filesystem::path(modelPath).lexically_normal().filename().string());
  if (api.servedModelName.empty() || api.servedModelName == ".")
    api.servedModelName = std::filesystem::absolute(modelPath)
                              .lexically_normal()
                              .parent_path()
                              .filename()
                              .string();

  // The engine, as bench builds it.
  const std::string backendName = args.get("--backend", "cpu");
  INFER_ASSIGN_OR_RETURN(int64_t threads, args.getInt("--threads", 0));
  if (threads < 0 || threads > 1024)
    return invalidArgument("--threads must be in [0, 1024]");
  const bool poolFromMemory =
      backendName == "cuda" && !args.has("--num-blocks");
  INFER_ASSIGN_OR_RETURN(double memoryFraction,
                         args.getDouble("--gpu-memory-utilization", 0.9));
  if (args.has("--gpu-memory-utilization") && backendName != "cuda")
    return invalidArgument("--gpu-memory-utilization needs --backend cuda");
  if (args.has("--gpu-memory-utilization") && args.has("--num-blocks"))
    return invalidArgument(
        "give --num-blocks or --gpu-memory-utilization, not both");
  if (!(memoryFraction > 0 && memoryFraction <= 1))
    return invalidArgument("--gpu-memory-utilization must be in (0, 1]");
  INFER_ASSIGN_OR_RETURN(int64_t numBlocks, args.getInt("--num-blocks", 2048));
  if (numBlocks < 1)
    return invalidArgument("--num-blocks must be > 0");

  INFER_ASSIGN_OR_RETURN(LoadedModel model, loadModel(modelPath));
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer,
                         loadTokenizer(model.artifact));
  EngineConfig config = engineConfigFor(model.artifact);
  config.tokenizer = tokenizer.get();
  config.enablePrefixCaching = !args.has("--no-prefix-caching");
  config.asyncScheduling = !args.has("--no-async-scheduling");
  // auto: 1024 running sequences on cuda (vLLM's default on large GPUs;
  // the largest decode batch the backend captures graphs for), 256 on cpu.
  // The KV pool bounds what runs at once either way (preempting when full).
  config.scheduler.maxNumSeqs = backendName == "cuda" ? 1024 : 256;
  if (args.get("--max-num-seqs", "auto") != "auto") {
    INFER_ASSIGN_OR_RETURN(config.scheduler.maxNumSeqs,
                           args.getInt("--max-num-seqs", 0));
  }
  config.scheduler.maxNumBatchedTokens =
      autoMaxNumBatchedTokens(backendName, /*offline=*/false);
  if (args.get("--max-num-batched-tokens", "auto") != "auto") {
    INFER_ASSIGN_OR_RETURN(config.scheduler.maxNumBatchedTokens,
                           args.getInt("--max-num-batched-tokens", 0));
  }
  const std::string policy = args.get("--scheduling-policy", "fcfs");
  if (policy != "fcfs" && policy != "priority")
    return invalidArgument("--scheduling-policy must be fcfs or priority");
  config.scheduler.policy = policy == "priority" ? SchedulingPolicy::kPriority
                                                 : SchedulingPolicy::kFcfs;
  if (config.scheduler.maxNumSeqs <= 0 ||
      config.scheduler.maxNumBatchedTokens <= 0)
    return invalidArgument(
        "--max-num-seqs and --max-num-batched-tokens must be > 0");

  // The chat template: --chat-template, else the tokenizer's own.
  std::unique_ptr<serving::ChatTemplate> chatTemplate;
  if (args.has("--chat-template")) {
    INFER_ASSIGN_OR_RETURN(std::string source,
                           readFile(*args.get("--chat-template")));
    nlohmann::json tokens = nlohmann::json::object();
    if (tokenizer) {
      tokens["bos_token"] = tokenizer->bosToken();
      tokens["eos_token"] = tokenizer->eosToken();
    }
    INFER_ASSIGN_OR_RETURN(chatTemplate,
                           serving::ChatTemplate::create(source, tokens));
  } else if (tokenizer) {
    const std::string configPath =
        (std::filesystem::path(
             model.artifact.path(model.artifact.manifest.tokenizerFile))
             .parent_path() /
         "tokenizer_config.json")
            .string();
    if (std::filesystem::exists(configPath)) {
      StatusOr<std::unique_ptr<serving::ChatTemplate>> t =
          serving::ChatTemplate::fromTokenizerConfig(configPath);
      if (t.isOk())
        chatTemplate = std::move(t).value();
      else if (t.status().code() != StatusCode::kNotFound)
        return t.status();
    }
  }

  WeightLoadOptions weights;
  weights.weightsDirOverride = args.get("--weights", "");
  weights.verifyHash = !args.has("--skip-weight-check");
  weights.showProgress = true;
  INFER_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                         createBackend(model.artifact, backendName, weights,
                                       poolFromMemory ? 0 : numBlocks,
                                       static_cast<int>(threads),
                                       memoryFraction));
  INFER_ASSIGN_OR_RETURN(
      Speculation speculation,
      createSpeculation(args, model.artifact, config.eosTokenIds, backendName,
                        numBlocks, static_cast<int>(threads)));
  config.numSpeculativeTokens = speculation.numSpeculativeTokens;
  Engine engine(*backend, config);
  if (speculation.speculator)
    engine.setProposer(std::move(speculation.speculator));

  serving::AsyncEngineOptions engineOptions;
  engineOptions.maxQueuedRequests = maxQueued;
  engineOptions.modelName = api.servedModelName;
  serving::AsyncEngine async(engine, engineOptions);
  api.maxModelLen = config.maxModelLen;
  api.vocabSize = config.vocabSize;
  serving::OpenAiServer server(async, tokenizer.get(), chatTemplate.get(), api);
  raiseFileLimit();
  serving::HttpServer httpServer(
      http, [&server](serving::HttpRequest request,
                      std::shared_ptr<serving::HttpResponder> responder) {
        server.handle(std::move(request), std::move(responder));
      });
  INFER_RETURN_IF_ERROR(httpServer.start());
  std::cerr << "infer serve: " << api.servedModelName << " on "
            << backend->name() << " (" << backend->numBlocks()
            << " KV blocks, max " << config.scheduler.maxNumSeqs
            << " sequences), listening on http://" << http.host << ":"
            << httpServer.port() << (api.apiKey.empty() ? "" : " (API key)")
            << (chatTemplate ? "" : "; no chat template") << std::endl;

  const std::string signal = httpServer.waitForSignal();
  const auto start = std::chrono::steady_clock::now();
  std::cerr << "infer serve: " << signal << ": draining " << async.numInFlight()
            << " requests (up to " << shutdownTimeout << " s)" << std::endl;
  httpServer.stopAccepting();
  async.shutdown(shutdownTimeout);
  // The last events are written out before the connections close.
  while (httpServer.numActiveResponses() > 0 &&
         std::chrono::steady_clock::now() - start <
             std::chrono::duration<double>(shutdownTimeout + 2.0))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  httpServer.stop();
  std::cerr << "infer serve: stopped" << std::endl;
  return Status::ok();
}

} // namespace infer::tool
