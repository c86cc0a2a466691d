#include "base/reason.hh"

namespace rdmasock {

namespace {
struct Entry {
    const char *code;
    const char *doc;
};
constexpr Entry kReasons[] = {
#define RS_REASON(id, code, doc) {code, doc},
#include "base/reason.def"
#undef RS_REASON
};
}  // namespace

const char *reason_code(Reason r) noexcept
{
    auto i = static_cast<unsigned>(r);
    return i < kReasonCount ? kReasons[i].code : "unknown";
}

const char *reason_doc(Reason r) noexcept
{
    auto i = static_cast<unsigned>(r);
    return i < kReasonCount ? kReasons[i].doc : "unknown reason";
}

}  // namespace rdmasock
