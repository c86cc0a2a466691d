// The seed corpus (tests/fuzz/corpus/<target>/<name>) and known-answer vectors, laid
// out by hand from the tables of docs/protocol.md (not produced by the encoders).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rsfuzz {

using Bytes = std::vector<uint8_t>;

struct Seed {
    std::string target;
    std::string name;
    Bytes bytes;
};

std::vector<Seed> seeds();

// The encoders produce, and the decoders accept, the hand-laid messages; prints what
// differs and returns false.
bool check_known_answers();

}  // namespace rsfuzz
