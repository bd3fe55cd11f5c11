//===- ChatPage.h - The chat page served at GET / ---------------*- C++ -*-===//
//
// runtime/serving/chat_page/index.html, compiled into the binary by
// chat_page/EmbedChatPage.cmake: a self-contained page (inline CSS and JS,
// nothing fetched but the API) that chats with /v1/chat/completions,
// streaming.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_SERVING_CHATPAGE_H
#define INFER_RUNTIME_SERVING_CHATPAGE_H

#include <string_view>

namespace infer::serving {

/// The page's bytes (UTF-8 HTML).
std::string_view chatPageHtml();

/// The Content-Security-Policy to serve it with: same-origin fetches only,
/// and the page's inline style and script allowed by their SHA-256 hashes.
std::string_view chatPageContentSecurityPolicy();

} // namespace infer::serving

#endif // INFER_RUNTIME_SERVING_CHATPAGE_H
