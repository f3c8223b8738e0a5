// A short children's story in the style stories260K was trained on, and its first tokens: the prompt of the
// compression tests that need a coherent text rather than random ids.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace infokv_test {

inline constexpr const char *kLilyStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. One day, she saw "
    "a big, red ball. She wanted to play with it, but it was too high. She asked her mom to help her. Her mom said, "
    "\"Let's get a stick and knock it down.\" They found a long stick and Lily tried to reach the ball. She jumped "
    "and jumped, and finally the ball fell down. Lily was so happy. She thanked her mom and they played together. "
    "The next day, Lily and her friend Tom went to the beach. They built a big sand castle with a tall tower. A "
    "wave came and took the tower away, but they laughed and built it again, higher than before.";

// The first n tokens of the story (with BOS), fewer if it is shorter.
inline std::vector<int32_t> story_tokens(const infokv::Tokenizer &tok, size_t n) {
  std::vector<int32_t> t = tok.encode(kLilyStory, true);
  t.resize(std::min(n, t.size()));
  return t;
}

}  // namespace infokv_test
