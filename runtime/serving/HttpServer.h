//===- HttpServer.h - HTTP/1.1 server on Boost.Beast ------------*- C++ -*-===//
//
// A small HTTP/1.1 server: a fixed pool of io threads runs every connection
// (Boost.Asio; no thread per connection, so thousands of idle or streaming
// connections cost a socket and a few kilobytes each). Beast parses requests
// with a body-size and header-size limit and a timeout for reading each
// request; responses are written from a queue per connection, whole or as a
// chunked stream (server-sent events).
//
//   acceptor ─▶ Session (strand) ─ read request ─▶ Handler(request, Responder)
//                  ▲                                     │ any thread
//                  └── write queue ◀── send / write / end┘
//
// While a response is pending the session keeps a read open on the socket,
// so a client that goes away is noticed at once (Responder::onClose) even
// before anything is written to it.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_HTTPSERVER_H
#define INFER_RUNTIME_SERVING_HTTPSERVER_H

#include "runtime/support/Status.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace infer::serving {

struct HttpRequest {
  std::string method;
  /// The path without the query string.
  std::string path;
  std::string query;
  /// Header names in lower case.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  /// The first value of header `name` (lower case), or "".
  std::string header(const std::string &name) const;
};

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

/// Answers one request; every method may be called from any thread.
class HttpResponder {
public:
  virtual ~HttpResponder() = default;
  /// A whole response (its headers only, Content-Length included, when the
  /// request was HEAD).
  virtual void send(int status, const std::string &contentType,
                    std::string body, const HttpHeaders &headers = {}) = 0;
  /// Starts a chunked 200 response (text/event-stream for SSE).
  virtual void startStream(const std::string &contentType) = 0;
  /// One chunk of a started stream.
  virtual void write(std::string data) = 0;
  /// Ends a started stream.
  virtual void endStream() = 0;
  /// Called once if the connection closes before the response ends. Set it
  /// from the handler, before any other thread can answer.
  virtual void onClose(std::function<void()> callback) = 0;
};

using HttpHandler =
    std::function<void(HttpRequest request, std::shared_ptr<HttpResponder>)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  int numThreads = 2;
  /// Largest request body; a larger one gets 413.
  size_t maxBodyBytes = 4u << 20;
  /// Time to read one whole request (headers and body), and the longest a
  /// kept-alive connection may sit idle.
  double requestTimeoutSeconds = 30.0;
  /// A comment line sent on a stream with nothing else for this long
  /// (0: never), so proxies and clients keep it open through long prefills.
  double keepAliveCommentSeconds = 10.0;
};

class HttpServer {
public:
  explicit HttpServer(HttpServerOptions options, HttpHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer &) = delete;
  HttpServer &operator=(const HttpServer &) = delete;

  /// Binds and listens; the io threads start serving.
  Status start();
  /// The port bound (useful with port 0).
  int port() const;
  /// Stops accepting new connections; open ones continue.
  void stopAccepting();
  /// Responses started and not yet ended.
  int64_t numActiveResponses() const;
  /// Closes every connection and joins the io threads.
  void stop();
  /// Blocks until SIGINT or SIGTERM arrives (or stop()); returns its name.
  std::string waitForSignal();

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_HTTPSERVER_H
