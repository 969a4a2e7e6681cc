#include "base/text.h"

#include <catch2/catch.hpp>

using namespace rankcheck;

TEST_CASE("text: rank ranges") {
  CHECK(format_ranks({8, 10, 11, 12, 13, 14, 15}) == "8,10-15");
  CHECK(format_ranks({3, 1, 2, 2}) == "1-3");
  CHECK(format_ranks({}).empty());
  CHECK(format_ranks({0, 2, 4, 6, 8}, 2) == "0,2,... (+3 more)");
}

TEST_CASE("text: lists") {
  CHECK(format_list({"a"}) == "a");
  CHECK(format_list({"a", "b"}) == "a and b");
  CHECK(format_list({"a", "b", "c"}) == "a, b and c");
  CHECK(format_list({"a", "b", "c", "d"}, 2) == "a, b and 2 more");
  CHECK(format_list({"a", "b", "c"}, 2) == "a, b and c");
}

TEST_CASE("text: peer strings are made safe for a terminal") {
  CHECK(printable("gpu-01") == "gpu-01");
  CHECK(printable("a\x1b[2Jb") == "a\\x1b[2Jb");
  CHECK(printable(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(printable("caf\xc3\xa9") == "caf\xc3\xa9");    // valid UTF-8 stays
  CHECK(printable("bad\xff\xfe") == "bad\\xff\\xfe");  // invalid bytes escaped
  CHECK(printable("\xc2\x9b"
                  "31m") == "\\xc2\\x9b31m");             // C1 CSI escaped
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate is not UTF-8
  CHECK(printable(std::string(200, 'x'), 10) == "xxxxxxxxxx...");
}

TEST_CASE("text: only well-formed UTF-8 passes, by lead byte and continuation") {
  CHECK(printable("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");  // U+1F600, four bytes
  CHECK(printable("\xe2\x82\xac") == "\xe2\x82\xac");          // U+20AC, three bytes
  // F5-FF start nothing: they could only begin code points past U+10FFFF.
  CHECK(printable("\xf5\x80\x80") == "\\xf5\\x80\\x80");
  CHECK(printable("\xff\x80\x80") == "\\xff\\x80\\x80");
  CHECK(printable("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // past U+10FFFF
  CHECK(printable("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
  CHECK(printable("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");           // overlong '/'
  CHECK(printable("\xe2\x28\xa1") == "\\xe2(\\xa1");               // bad continuation
}

TEST_CASE("text: seconds") {
  CHECK(format_seconds(21) == "0.021 s");
  CHECK(format_seconds(1330) == "1.33 s");
  CHECK(format_seconds(41000) == "41 s");
}

TEST_CASE("text: bidi controls and zero-width characters are shown, not obeyed") {
  // U+202E RIGHT-TO-LEFT OVERRIDE would make "gpu-01<RLO>10-upg" read as another host.
  CHECK(printable("gpu-01\xe2\x80\xae"
                  "10-upg") == "gpu-01\\u{202e}10-upg");
  CHECK(printable("gpu\xe2\x80\x8b-01") == "gpu\\u{200b}-01");  // zero-width space
  CHECK(printable("\xef\xbb\xbfgpu") == "\\u{feff}gpu");        // byte-order mark
  CHECK(printable("Grüße ✓") == "Grüße ✓");                     // the rest stays readable
}

TEST_CASE("text: a captured terminal line reads as it was displayed") {
  std::string buf;
  // Nothing to do: the very same bytes, no copy.
  std::string_view plain = "[rank1]: RuntimeError: boom";
  CHECK(as_displayed(plain, buf).data() == plain.data());
  std::string_view crlf = "line\r";
  CHECK(as_displayed(crlf, buf) == "line\r");
  // Colour (SGR), a cursor move, a window title (OSC ... BEL), a charset switch.
  CHECK(as_displayed("\x1b[1;31m\xE2\x9C\x97 missing-rank\x1b[0m: 1 of 8", buf) ==
        "\xE2\x9C\x97 missing-rank: 1 of 8");
  CHECK(as_displayed("\x1b[2K\x1b[1Gstep 10", buf) == "step 10");
  CHECK(as_displayed("\x1b]0;title\astill here", buf) == "still here");
  CHECK(as_displayed("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", buf) == "link");
  CHECK(as_displayed("\x1b(Bplain", buf) == "plain");
  // A progress bar a carriage return overwrote: the last write, a CRLF end dropped.
  CHECK(as_displayed(" 10%|#   |\r 50%|##  |\rRuntimeError: DataLoader worker\r", buf) ==
        "RuntimeError: DataLoader worker");
  // A lone escape at the end, or a sequence cut short, loses nothing before it.
  CHECK(as_displayed("tail\x1b", buf) == "tail");
  CHECK(as_displayed("cut\x1b[12", buf) == "cut");
}

TEST_CASE("text: a locale that is not UTF-8 gets ASCII (newcomer bug 9)") {
  CHECK(locale_wants_ascii(nullptr, nullptr, "C"));
  CHECK(locale_wants_ascii("POSIX", nullptr, "en_US.UTF-8"));  // LC_ALL wins
  CHECK(locale_wants_ascii(nullptr, "en_US.ISO-8859-1", nullptr));
  CHECK_FALSE(locale_wants_ascii(nullptr, nullptr, nullptr));  // unset: as today
  CHECK_FALSE(locale_wants_ascii("", "", "C.UTF-8"));
  CHECK_FALSE(locale_wants_ascii(nullptr, nullptr, "de_DE.utf8"));
  CHECK(to_ascii("  \xE2\x9C\x97 missing-rank   rank 1 \xC2\xB7 h1 \xE2\x80\x94 2.0 \xC2\xB5s") ==
        "  x missing-rank   rank 1 - h1 - 2.0 us");
  CHECK(to_ascii("a \xE2\x80\xA6 b") == "a ... b");
  CHECK(to_ascii("caf\xC3\xA9 \xF0\x9F\x99\x82!") == "caf? ?!");  // anything else: one '?'
  CHECK(to_ascii("\xE2\x80") == "?");                             // cut short: no overrun
}
