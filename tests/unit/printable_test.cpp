#include "protocol/printable.h"

#include <gtest/gtest.h>

#include <string>

namespace ggml_remote {
namespace {

TEST(Printable, KeepsPrintableAsciiAsItIs) {
    EXPECT_EQ(printable("blk.0.attn_q.weight (f16) 'x'"), "blk.0.attn_q.weight (f16) 'x'");
    EXPECT_EQ(printable(""), "");
}

TEST(Printable, EscapesNewlinesSoNoLineCanBeForged) {
    const std::string forged = "guest\n2026-12-01 12:00:00 ggml-remote-server: session 9 (root): TLS as 'admin'";
    const std::string shown = printable(forged, forged.size());
    EXPECT_EQ(shown.find('\n'), std::string::npos);
    EXPECT_EQ(shown.rfind("guest\\x0a2026-12-01 12:00:00", 0), 0u);
}

TEST(Printable, EscapesEveryControlAndNonAsciiByte) {
    EXPECT_EQ(printable(std::string("a\rb\tc\x1b[2Jd\x7f", 11)), "a\\x0db\\x09c\\x1b[2Jd\\x7f");
    EXPECT_EQ(printable(std::string("nul\0end", 7)), "nul\\x00end");
    EXPECT_EQ(printable("caf\xc3\xa9 \x9b"), "caf\\xc3\\xa9 \\x9b");
}

TEST(Printable, EscapesTheBackslashSoEveryEscapeMapsBackToOneInput) {
    // A guest that sends the four characters \x0a must not look like one that sent a newline.
    EXPECT_EQ(printable("\\x0a"), "\\x5cx0a");
    EXPECT_NE(printable("\\x0a"), printable("\n"));
}

TEST(Printable, CapsTheLengthAndSaysHowMuchWasLeftOut) {
    const std::string long_name(10000, 'A');
    EXPECT_EQ(printable(long_name, 8), "AAAAAAAA...(+9992 bytes)");
    EXPECT_EQ(printable(long_name).size(), kShownBytes + std::string("...(+9936 bytes)").size());
    EXPECT_EQ(printable("12345678", 8), "12345678");
    EXPECT_EQ(printable("123456789", 8), "12345678...(+1 bytes)");
}

TEST(Printable, CapCountsInputBytesSoEscapesCannotBeCutInHalf) {
    EXPECT_EQ(printable("\n\n\n", 2), "\\x0a\\x0a...(+1 bytes)");
}

TEST(OneLine, EscapesOnlyControlBytes) {
    EXPECT_EQ(one_line("unix:/run/caf\xc3\xa9.sock \\ 'x'"), "unix:/run/caf\xc3\xa9.sock \\ 'x'");
    EXPECT_EQ(one_line("a\nb\rc\x1b"), "a\\x0ab\\x0dc\\x1b");
    EXPECT_EQ(one_line(std::string("\0\x7f", 2)), "\\x00\\x7f");
}

TEST(JsonString, QuotesPlainTextAsItIs) {
    EXPECT_EQ(json_string("listening on unix:/run/x.sock"), "\"listening on unix:/run/x.sock\"");
    EXPECT_EQ(json_string(""), "\"\"");
}

TEST(JsonString, EscapesQuotesAndBackslashes) {
    EXPECT_EQ(json_string("say \"hi\" \\ there"), "\"say \\\"hi\\\" \\\\ there\"");
}

TEST(JsonString, EscapesEveryControlByteSoTheObjectStaysOneLine) {
    EXPECT_EQ(json_string("a\nb\tc"), "\"a\\nb\\tc\"");
    EXPECT_EQ(json_string(std::string("\r\x1b[2J\0\x7f", 7)), "\"\\u000d\\u001b[2J\\u0000\\u007f\"");
}

TEST(JsonString, KeepsValidUtf8) {
    EXPECT_EQ(json_string("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"),
              "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\"");
}

TEST(JsonString, EscapesEachByteOfInvalidUtf8) {
    EXPECT_EQ(json_string("\x9b"), "\"\\u009b\"") << "a lone continuation byte";
    EXPECT_EQ(json_string("\xc3"), "\"\\u00c3\"") << "a sequence cut short at the end";
    EXPECT_EQ(json_string("\xc3(x"), "\"\\u00c3(x\"") << "a sequence cut short by ASCII";
    EXPECT_EQ(json_string("\xc0\xaf"), "\"\\u00c0\\u00af\"") << "an overlong '/'";
    EXPECT_EQ(json_string("\xed\xa0\x80"), "\"\\u00ed\\u00a0\\u0080\"") << "a surrogate";
    EXPECT_EQ(json_string("\xf4\x90\x80\x80"), "\"\\u00f4\\u0090\\u0080\\u0080\"") << "above U+10FFFF";
    EXPECT_EQ(json_string("\xff"), "\"\\u00ff\"");
}

TEST(HexBytes, TwoLowercaseDigitsAByteInOrder) {
    const uint8_t bytes[] = {0x00, 0x0f, 0xa5, 0xff};
    EXPECT_EQ(hex_bytes(bytes, sizeof(bytes)), "000fa5ff");
    EXPECT_EQ(hex_bytes(bytes, 0), "");
}

}  // namespace
}  // namespace ggml_remote
