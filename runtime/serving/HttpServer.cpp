//===- HttpServer.cpp - HTTP/1.1 server on Boost.Beast --------------------===//

#include "runtime/serving/HttpServer.h"

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

namespace infer::serving {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string HttpRequest::header(const std::string &name) const {
  for (const auto &[key, value] : headers)
    if (key == name)
      return value;
  return "";
}

namespace {

using Clock = std::chrono::steady_clock;

/// Kept while a client sends a next request during a response; more than
/// this closes the connection.
constexpr size_t kMaxPipelinedBytes = 1u << 20;

const char *reasonPhrase(int status) {
  switch (status) {
  case 200:
    return "OK";
  case 400:
    return "Bad Request";
  case 401:
    return "Unauthorized";
  case 404:
    return "Not Found";
  case 405:
    return "Method Not Allowed";
  case 413:
    return "Payload Too Large";
  case 429:
    return "Too Many Requests";
  case 500:
    return "Internal Server Error";
  case 503:
    return "Service Unavailable";
  default:
    return "Unknown";
  }
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return text;
}

struct Shared {
  HttpServerOptions options;
  HttpHandler handler;
  std::atomic<int64_t> numActiveResponses{0};
};

class Session : public HttpResponder,
                public std::enable_shared_from_this<Session> {
public:
  Session(tcp::socket socket, std::shared_ptr<Shared> shared)
      : stream_(std::move(socket)), shared_(std::move(shared)),
        timer_(stream_.get_executor()) {}

  void start() {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this()] { self->readRequest(); });
  }

  void send(int status, const std::string &contentType, std::string body,
            const HttpHeaders &headers) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), status,
                                       contentType, body = std::move(body),
                                       headers]() mutable {
      if (self->closed_ || !self->responseOpen_ || self->responseStarted_)
        return;
      self->responseStarted_ = true;
      std::string head = self->head(status, contentType, headers);
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n";
      // HEAD: the headers GET would send, and no body.
      self->enqueue(
          self->headRequest_ ? std::move(head) : std::move(head) + body, true);
    });
  }

  void startStream(const std::string &contentType) override {
    net::post(stream_.get_executor(), [self = shared_from_this(), contentType] {
      if (self->closed_ || !self->responseOpen_ || self->responseStarted_)
        return;
      self->responseStarted_ = true;
      self->streaming_ = true;
      std::string head = self->head(
          200, contentType,
          {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
      head += "Transfer-Encoding: chunked\r\n\r\n";
      self->enqueue(std::move(head), false);
      self->armKeepAliveComment();
    });
  }

  void write(std::string data) override {
    if (data.empty())
      return;
    net::post(stream_.get_executor(),
              [self = shared_from_this(), data = std::move(data)] {
                if (self->closed_ || !self->streaming_)
                  return;
                self->enqueue(chunk(data), false);
              });
  }

  void endStream() override {
    net::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->closed_ || !self->streaming_)
        return;
      self->streaming_ = false;
      self->enqueue("0\r\n\r\n", true);
    });
  }

  void onClose(std::function<void()> callback) override {
    onClose_ = std::move(callback);
  }

private:
  struct Pending {
    std::string data;
    bool endsResponse = false;
  };

  static std::string chunk(const std::string &data) {
    char size[32];
    std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
    return size + data + "\r\n";
  }

  std::string head(int status, const std::string &contentType,
                   const HttpHeaders &headers) const {
    std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                      reasonPhrase(status) + "\r\nServer: infer\r\n";
    if (!contentType.empty())
      out += "Content-Type: " + contentType + "\r\n";
    for (const auto &[name, value] : headers)
      out += name + ": " + value + "\r\n";
    if (!keepAlive_)
      out += "Connection: close\r\n";
    return out;
  }

  void readRequest() {
    if (closed_)
      return;
    parser_.emplace();
    headRequest_ = false;
    parser_->body_limit(shared_->options.maxBodyBytes);
    parser_->header_limit(64u << 10);
    reading_ = true;
    stream_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(shared_->options.requestTimeoutSeconds)));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) {
          self->onHeader(ec);
        });
  }

  /// Answers `Expect: 100-continue` (curl sends it before bodies over 1 KiB
  /// and would otherwise wait a second), then reads the body.
  void onHeader(beast::error_code ec) {
    if (ec)
      return onRequest(ec);
    auto readBody = [self = shared_from_this()] {
      http::async_read(
          self->stream_, self->buffer_, *self->parser_,
          [self](beast::error_code error, size_t) { self->onRequest(error); });
    };
    if (!parser_->is_done() &&
        beast::iequals(parser_->get()[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(stream_.socket(), net::buffer(kContinue),
                       [self = shared_from_this(),
                        readBody](beast::error_code error, size_t) {
                         if (error)
                           return self->onRequest(error);
                         readBody();
                       });
      return;
    }
    readBody();
  }

  void onRequest(beast::error_code ec) {
    reading_ = false;
    if (ec == http::error::body_limit) {
      keepAlive_ = false;
      openResponse();
      send(
          413, "application/json",
          R"({"error":{"message":"the request body exceeds )" +
              std::to_string(shared_->options.maxBodyBytes) +
              R"( bytes","type":"invalid_request_error","param":null,"code":413}})",
          {});
      return;
    }
    if (ec &&
        ec.category() ==
            http::make_error_code(http::error::bad_target).category() &&
        ec != http::error::end_of_stream &&
        ec != http::error::partial_message) {
      keepAlive_ = false;
      openResponse();
      send(400, "application/json",
           R"({"error":{"message":"malformed HTTP request: )" + ec.message() +
               R"(","type":"invalid_request_error","param":null,"code":400}})",
           {});
      return;
    }
    if (ec) {
      closeNow();
      return;
    }
    http::request<http::string_body> message = parser_->release();
    parser_.reset();
    HttpRequest request;
    request.method = std::string(message.method_string());
    headRequest_ = message.method() == http::verb::head;
    const std::string target(message.target());
    const size_t q = target.find('?');
    request.path = target.substr(0, q);
    if (q != std::string::npos)
      request.query = target.substr(q + 1);
    for (const auto &field : message)
      request.headers.emplace_back(lower(std::string(field.name_string())),
                                   std::string(field.value()));
    request.body = std::move(message.body());
    keepAlive_ = message.keep_alive();
    openResponse();
    stream_.expires_never();
    watch();
    shared_->handler(std::move(request), shared_from_this());
  }

  void openResponse() {
    responseOpen_ = true;
    responseStarted_ = false;
    onClose_ = nullptr;
    ++shared_->numActiveResponses;
  }

  /// A read that completes when the client closes (or sends more).
  void watch() {
    if (watching_ || closed_)
      return;
    watching_ = true;
    stream_.socket().async_read_some(
        buffer_.prepare(4096),
        [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->onWatch(ec, n);
        });
  }

  void onWatch(beast::error_code ec, size_t n) {
    watching_ = false;
    if (ec) {
      closeNow();
      return;
    }
    buffer_.commit(n);
    if (responseOpen_) {
      if (buffer_.size() > kMaxPipelinedBytes) {
        closeNow();
        return;
      }
      watch();
    } else {
      readRequest();
    }
  }

  void enqueue(std::string data, bool endsResponse) {
    queue_.push_back({std::move(data), endsResponse});
    if (!writing_)
      writeNext();
  }

  void writeNext() {
    if (queue_.empty() || closed_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    net::async_write(stream_.socket(), net::buffer(queue_.front().data),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->onWrite(ec);
                     });
  }

  void onWrite(beast::error_code ec) {
    // A close (the watch read saw the client go) may have run between the
    // write and this handler; the queue is gone then.
    if (ec || closed_ || queue_.empty()) {
      writing_ = false;
      closeNow();
      return;
    }
    lastWrite_ = Clock::now();
    const bool ends = queue_.front().endsResponse;
    queue_.pop_front();
    if (ends)
      finishResponse();
    writeNext();
  }

  void finishResponse() {
    responseOpen_ = false;
    onClose_ = nullptr;
    --shared_->numActiveResponses;
    if (!keepAlive_) {
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
      armIdleTimeout(1.0);
      return;
    }
    if (watching_)
      armIdleTimeout(shared_->options.requestTimeoutSeconds);
    else
      readRequest();
  }

  void armIdleTimeout(double seconds) {
    const uint64_t generation = ++timerGeneration_;
    timer_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(seconds)));
    timer_.async_wait(
        [self = shared_from_this(), generation](beast::error_code ec) {
          if (ec || generation != self->timerGeneration_)
            return;
          if (!self->responseOpen_ && !self->reading_)
            self->closeNow();
        });
  }

  void armKeepAliveComment() {
    const double interval = shared_->options.keepAliveCommentSeconds;
    if (interval <= 0)
      return;
    const uint64_t generation = ++timerGeneration_;
    timer_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(interval)));
    timer_.async_wait([self = shared_from_this(), generation,
                       interval](beast::error_code ec) {
      if (ec || generation != self->timerGeneration_ || !self->streaming_ ||
          self->closed_)
        return;
      if (std::chrono::duration<double>(Clock::now() - self->lastWrite_)
              .count() >= interval * 0.99)
        self->enqueue(chunk(": keep-alive\n\n"), false);
      self->armKeepAliveComment();
    });
  }

  void closeNow() {
    if (closed_)
      return;
    closed_ = true;
    ++timerGeneration_;
    timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    queue_.clear();
    streaming_ = false;
    if (responseOpen_) {
      responseOpen_ = false;
      --shared_->numActiveResponses;
      if (onClose_) {
        std::function<void()> callback = std::move(onClose_);
        onClose_ = nullptr;
        callback();
      }
    }
  }

  beast::tcp_stream stream_;
  std::shared_ptr<Shared> shared_;
  net::steady_timer timer_;
  uint64_t timerGeneration_ = 0;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::deque<Pending> queue_;
  std::function<void()> onClose_;
  Clock::time_point lastWrite_ = Clock::now();
  bool keepAlive_ = true;
  bool headRequest_ = false;
  bool reading_ = false;
  bool watching_ = false;
  bool writing_ = false;
  bool responseOpen_ = false;
  bool responseStarted_ = false;
  bool streaming_ = false;
  bool closed_ = false;
};

} // namespace

struct HttpServer::Impl {
  explicit Impl(HttpServerOptions options, HttpHandler handler)
      : shared(std::make_shared<Shared>()), acceptor(ioc),
        signals(ioc, SIGINT, SIGTERM) {
    shared->options = std::move(options);
    shared->handler = std::move(handler);
  }

  void accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec,
                                                        tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open())
        return;
      if (!ec)
        std::make_shared<Session>(std::move(socket), shared)->start();
      accept();
    });
  }

  void notify(std::string name) {
    std::lock_guard<std::mutex> lock(mutex);
    if (signalName.empty())
      signalName = std::move(name);
    signalled.notify_all();
  }

  std::shared_ptr<Shared> shared;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::signal_set signals;
  std::vector<std::thread> threads;
  std::mutex mutex;
  std::condition_variable signalled;
  std::string signalName;
  bool stopped = false;
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  const HttpServerOptions &options = impl_->shared->options;
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto endpoints = resolver.resolve(options.host, std::to_string(options.port),
                                    tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    return invalidArgument("cannot resolve host '" + options.host +
                           "': " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  tcp::acceptor &acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec)
    acceptor.bind(endpoint, ec);
  if (!ec)
    acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return invalidArgument("cannot listen on " + options.host + ":" +
                           std::to_string(options.port) + ": " + ec.message());
  impl_->signals.async_wait(
      [impl = impl_.get()](beast::error_code error, int signal) {
        if (!error)
          impl->notify(signal == SIGINT ? "SIGINT" : "SIGTERM");
      });
  impl_->accept();
  const int threads = std::max(options.numThreads, 1);
  for (int i = 0; i < threads; ++i)
    impl_->threads.emplace_back([impl = impl_.get()] { impl->ioc.run(); });
  return Status::ok();
}

int HttpServer::port() const {
  beast::error_code ec;
  tcp::endpoint endpoint = impl_->acceptor.local_endpoint(ec);
  return ec ? -1 : endpoint.port();
}

void HttpServer::stopAccepting() {
  net::post(impl_->ioc, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
}

int64_t HttpServer::numActiveResponses() const {
  return impl_->shared->numActiveResponses.load();
}

void HttpServer::stop() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    if (impl_->stopped)
      return;
    impl_->stopped = true;
    impl_->signalled.notify_all();
  }
  impl_->ioc.stop();
  for (std::thread &t : impl_->threads)
    t.join();
  impl_->threads.clear();
}

std::string HttpServer::waitForSignal() {
  std::unique_lock<std::mutex> lock(impl_->mutex);
  impl_->signalled.wait(
      lock, [&] { return !impl_->signalName.empty() || impl_->stopped; });
  return impl_->signalName;
}

} // namespace infer::serving
