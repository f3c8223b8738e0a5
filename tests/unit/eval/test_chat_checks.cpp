// The answer checks of `infokv eval-chat` (src/eval/chat_checks): each kind passes what complies and fails what does
// not, bad values are refused, and ROUGE-L recall measures how much of a reference an answer repeats.
#include <gtest/gtest.h>

#include "eval/chat_checks.hpp"
#include "util/error.hpp"

using infokv::check_answer;

// Each row: a check kind, its argument, an answer, and whether the answer complies.
struct Verdict {
  const char *kind, *arg, *answer;
  bool pass;
};

const Verdict kVerdicts[] = {
    {"lowercase", "", "the harbour is to the north.", true},
    {"lowercase", "", "The harbour is to the north.", false},
    {"lowercase", "", "the port of \xC3\x89vian", false},        // É
    {"lowercase", "", "le caf\xC3\xA9 est ouvert 24/7", true},    // é
    {"no_commas", "", "first then second", true},
    {"no_commas", "", "first, then second", false},
    {"no_commas", "", "first\xEF\xBC\x8C second", false},        // a full-width comma
    {"keyword", "Ahoy", "well, AHOY there", true},                // case-insensitive
    {"keyword", "ahoy", "hello there", false},
    {"max_words", "3", "one two three", true},
    {"max_words", "3", "one two three four", false},
    {"max_words", "1", "  single\n", true},
    {"starts_with", "Captain:", "  Captain: all clear", true},    // surrounding white space is ignored
    {"starts_with", "Captain:", "captain: all clear", false},
    {"ends_with", "Over.", "All clear. Over.\n", true},
    {"ends_with", "Over.", "Over. All clear", false},
    {"ends_with", "long suffix", "fix", false},
    {"json", "", " {\"port\": \"Lisbon\", \"days\": 3}\n", true},
    {"json", "", "[1, 2]", true},
    {"json", "", "{\"port\": \"Lisbon\",}", false},
    {"json", "", "Sure! {\"a\": 1}", false},
    {"json", "", "", false},
};

TEST(ChatChecks, EachKindPassesWhatCompliesAndFailsWhatDoesNot) {
  for (const Verdict &v : kVerdicts)
    EXPECT_EQ(check_answer(v.kind, v.arg, v.answer), v.pass) << v.kind << "(" << v.arg << ") on \"" << v.answer << "\"";
}

TEST(ChatChecks, BadArgumentsAreRefused) {
  EXPECT_THROW(check_answer("keyword", "", "x"), infokv::Error);
  for (const char *bad : {"0", "-2", "x", "3.5", ""}) EXPECT_THROW(check_answer("max_words", bad, "a"), infokv::Error);
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
