#include "protocol/wire.h"

#include <catch2/catch.hpp>

using namespace rankcheck;
using Bytes = std::vector<uint8_t>;

namespace {
Bytes header(uint16_t version, uint16_t type, uint32_t length) {
  Writer w;
  w.bytes(kMagic);
  w.u16(version);
  w.u16(type);
  w.u32(length);
  return w.take();
}
}  // namespace

TEST_CASE("wire: fields are little-endian, field by field") {
  Writer w;
  w.u16(0x0102);
  w.u32(0x03040506);
  w.str("ab");
  CHECK(w.data() == Bytes{0x02, 0x01, 0x06, 0x05, 0x04, 0x03, 2, 0, 0, 0, 'a', 'b'});
  Reader r(w.data());
  CHECK(r.u16() == 0x0102);
  CHECK(r.u32() == 0x03040506);
  CHECK(r.str(8, "s") == "ab");
  r.expect_end();
  CHECK(r.ok());
}

TEST_CASE("wire: a frame round-trips through the stream decoder in pieces") {
  Bytes payload{1, 2, 3};
  Bytes frame = encode_frame(MsgType::kAdmit, payload);
  REQUIRE(frame.size() == kHeaderSize + 3);
  FrameBuffer buf;
  for (size_t i = 0; i + 1 < frame.size(); ++i) {
    buf.feed(std::span(&frame[i], 1));
    auto f = buf.next();
    REQUIRE(f.ok());
    CHECK(!f->has_value());
  }
  buf.feed(std::span(&frame.back(), 1));
  auto f = buf.next();
  REQUIRE(f.ok());
  REQUIRE(f->has_value());
  CHECK((*f)->header.type == uint16_t(MsgType::kAdmit));
  CHECK((*f)->payload == payload);
  CHECK(buf.buffered() == 0);
}

TEST_CASE("wire: a length above the type's cap is refused before the payload arrives") {
  auto h = decode_header(header(kProtocolVersion, uint16_t(MsgType::kHello), 0xFFFFFFFF));
  REQUIRE(!h.ok());
  CHECK(h.error().fault == Fault::kTooLarge);
  CHECK(h.error().message == "hello of 4294967295 bytes exceeds its cap of 65536");
  CHECK(!decode_header(header(kProtocolVersion, uint16_t(MsgType::kAdmit), 65)).ok());
  CHECK(decode_header(header(kProtocolVersion, uint16_t(MsgType::kAdmit), 64)).ok());
}

TEST_CASE("wire: garbage, unknown types and other versions") {
  Bytes http{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P', '/', '1'};
  auto h = decode_header(http);
  REQUIRE(!h.ok());
  CHECK(h.error().fault == Fault::kBadMagic);
  CHECK(h.error().message == "bad magic 47 45 54 20: not a rankcheck peer");

  // A TLS ClientHello is refused at its first byte by the stream decoder.
  FrameBuffer buf;
  buf.feed(Bytes{0x16});
  CHECK(!buf.next().ok());

  h = decode_header(header(kProtocolVersion, 99, 0));
  CHECK(h.error().fault == Fault::kUnknownType);
  CHECK(h.error().message == "unknown message type 99");

  uint16_t peer = 0;
  h = decode_header(header(4, uint16_t(MsgType::kHello), 10), &peer);
  CHECK(h.error().fault == Fault::kOtherVersion);
  CHECK(peer == 4);
  CHECK(h.error().message == "protocol version 4 (this rankcheck speaks 3)");

  CHECK(decode_header(Bytes{'R', 'K', 'C'}).error().message ==
        "short frame header (3 of 12 bytes)");
}

TEST_CASE("wire: truncated reads and oversized strings fail the reader, sticky") {
  Writer w;
  w.u32(1000);  // a string that claims 1000 bytes
  w.str("x");
  Reader r(w.data());
  CHECK(r.str(64, "host name").empty());
  CHECK(!r.ok());
  CHECK(r.error() == "host name of 1000 bytes exceeds 64");
  CHECK(r.u32() == 0);  // still failed

  Bytes three{1, 2, 3};
  Reader t(three);
  t.u32();
  CHECK(t.error() == "truncated: needs 4 more bytes at offset 0, has 3");

  Writer c;
  c.u32(5000);
  Reader rc(c.data());
  CHECK(rc.count(128, "environment variable") == 0);
  CHECK(rc.error() == "environment variable count 5000 exceeds 128");

  Bytes extra{1, 0, 9};
  Reader e(extra);
  e.u16();
  e.expect_end();
  CHECK(e.error() == "1 unexpected trailing bytes");
}
