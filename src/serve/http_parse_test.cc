// The request-reading limits of http_parse.h at their boundaries: a body or an announced length of
// exactly max_body_bytes is accepted (and gets its 100 Continue), one byte more is 413. The server
// tests and the fuzz target only use bodies far from the limit, so a limit off by one passed them
// (tools/mutate.py http_body_limit).
#include "serve/http_parse.h"

#include <gtest/gtest.h>

#include <string>

#include <boost/asio/buffer.hpp>

namespace gyre::serve {
namespace {

namespace http = boost::beast::http;

std::string Header(size_t content_length, bool expect_continue) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(content_length) +
         "\r\n" + (expect_continue ? "Expect: 100-continue\r\n" : "") + "\r\n";
}

// Feeds `bytes` to `parser` until it is done, fails, or needs more; returns the error (none: done
// or waiting for more).
boost::beast::error_code Feed(RequestParser& parser, const std::string& bytes) {
  boost::beast::error_code ec;
  size_t used = 0;
  while (!parser.is_done() && used < bytes.size()) {
    const size_t n = parser.put(boost::asio::buffer(bytes.data() + used, bytes.size() - used), ec);
    if (ec == http::error::need_more) return {};
    if (ec) return ec;
    if (n == 0) break;
    used += n;
  }
  return ec;
}

TEST(HttpParse, ABodyOfExactlyTheLimitIsReadAndOneByteMoreIs413) {
  HttpServerOptions o;
  o.max_body_bytes = 64;
  for (const size_t n : {size_t{0}, size_t{63}, size_t{64}}) {
    RequestParser parser;
    LimitRequestParser(o, parser);
    EXPECT_FALSE(Feed(parser, Header(n, false) + std::string(n, 'a'))) << n << " bytes";
    ASSERT_TRUE(parser.is_done()) << n << " bytes";
    EXPECT_EQ(ToHttpRequest(parser.release()).body, std::string(n, 'a'));
  }
  RequestParser parser;
  LimitRequestParser(o, parser);
  const auto ec = Feed(parser, Header(65, false) + std::string(65, 'a'));
  EXPECT_EQ(ec, http::error::body_limit);
  EXPECT_EQ(AnswerReadError(o, ec).status, 413);
}

TEST(HttpParse, ContinueIsSentUpToTheLimitOnly) {
  HttpServerOptions o;
  o.max_body_bytes = 64;
  for (const size_t n : {size_t{64}, size_t{65}}) {
    RequestParser parser;
    LimitRequestParser(o, parser);
    parser.eager(false);
    const auto ec = Feed(parser, Header(n, true));
    if (n <= 64) {
      EXPECT_FALSE(ec);
      ASSERT_TRUE(parser.is_header_done());
      EXPECT_TRUE(WantsContinue(o, parser));
    } else {
      EXPECT_EQ(ec, http::error::body_limit);  // Beast refuses the announced length at the header
    }
  }
  RequestParser plain;
  LimitRequestParser(o, plain);
  EXPECT_FALSE(Feed(plain, Header(10, false)));
  ASSERT_TRUE(plain.is_header_done());
  EXPECT_FALSE(WantsContinue(o, plain));  // no Expect header: no 100
}

}  // namespace
}  // namespace gyre::serve
