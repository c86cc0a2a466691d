#pragma once

#include <cstdint>

namespace rdmasock {

enum class Reason : uint8_t {
#define RS_REASON(id, code, doc) id,
#include "base/reason.def"
#undef RS_REASON
};

const char *reason_code(Reason r) noexcept;
const char *reason_doc(Reason r) noexcept;
constexpr unsigned kReasonCount = 0
#define RS_REASON(id, code, doc) +1
#include "base/reason.def"
#undef RS_REASON
    ;

}  // namespace rdmasock
