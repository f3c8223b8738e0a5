// The answer checks of `infokv eval-chat` (src/eval/chat_checks): each kind passes what complies and fails what does
// not, bad values are refused, and ROUGE-L recall measures how much of a reference an answer repeats.
#include <gtest/gtest.h>

#include "eval/chat_checks.hpp"
#include "util/error.hpp"

using infokv::check_answer;

TEST(ChatChecks, Lowercase) {
  EXPECT_TRUE(check_answer("lowercase", "", "the harbour is to the north."));
  EXPECT_FALSE(check_answer("lowercase", "", "The harbour is to the north."));
  EXPECT_FALSE(check_answer("lowercase", "", "the port of \xC3\x89vian"));  // É
  EXPECT_TRUE(check_answer("lowercase", "", "le caf\xC3\xA9 est ouvert 24/7"));  // é
}

TEST(ChatChecks, NoCommas) {
  EXPECT_TRUE(check_answer("no_commas", "", "first then second"));
  EXPECT_FALSE(check_answer("no_commas", "", "first, then second"));
  EXPECT_FALSE(check_answer("no_commas", "", "first\xEF\xBC\x8C second"));
}

TEST(ChatChecks, KeywordIsCaseInsensitive) {
  EXPECT_TRUE(check_answer("keyword", "Ahoy", "well, AHOY there"));
  EXPECT_FALSE(check_answer("keyword", "ahoy", "hello there"));
  EXPECT_THROW(check_answer("keyword", "", "x"), infokv::Error);
}

TEST(ChatChecks, MaxWords) {
  EXPECT_TRUE(check_answer("max_words", "3", "one two three"));
  EXPECT_FALSE(check_answer("max_words", "3", "one two three four"));
  EXPECT_TRUE(check_answer("max_words", "1", "  single\n"));
  for (const char *bad : {"0", "-2", "x", "3.5", ""}) EXPECT_THROW(check_answer("max_words", bad, "a"), infokv::Error);
}

TEST(ChatChecks, StartsAndEndsWithIgnoreSurroundingWhiteSpace) {
  EXPECT_TRUE(check_answer("starts_with", "Captain:", "  Captain: all clear"));
  EXPECT_FALSE(check_answer("starts_with", "Captain:", "captain: all clear"));
  EXPECT_TRUE(check_answer("ends_with", "Over.", "All clear. Over.\n"));
  EXPECT_FALSE(check_answer("ends_with", "Over.", "Over. All clear"));
  EXPECT_FALSE(check_answer("ends_with", "long suffix", "fix"));
}

TEST(ChatChecks, Json) {
  EXPECT_TRUE(check_answer("json", "", " {\"port\": \"Lisbon\", \"days\": 3}\n"));
  EXPECT_TRUE(check_answer("json", "", "[1, 2]"));
  EXPECT_FALSE(check_answer("json", "", "{\"port\": \"Lisbon\",}"));
  EXPECT_FALSE(check_answer("json", "", "Sure! {\"a\": 1}"));
  EXPECT_FALSE(check_answer("json", "", ""));
}

TEST(ChatChecks, UnknownKindsAreRefused) {
  EXPECT_TRUE(infokv::known_check("json"));
  EXPECT_FALSE(infokv::known_check("uppercase"));
  EXPECT_THROW(check_answer("uppercase", "", "X"), infokv::Error);
}

TEST(ChatChecks, RougeLRecall) {
  EXPECT_DOUBLE_EQ(infokv::rouge_l_recall("the code word is falcon", "The code word is FALCON."), 1.0);
  EXPECT_DOUBLE_EQ(infokv::rouge_l_recall("the code word is falcon", "I cannot share that."), 0.0);
  EXPECT_DOUBLE_EQ(infokv::rouge_l_recall("a b c d", "a x c y d"), 0.75);
  EXPECT_DOUBLE_EQ(infokv::rouge_l_recall("", "anything"), 0.0);
}
