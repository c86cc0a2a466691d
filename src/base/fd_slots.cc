#include "base/fd_slots.hh"

namespace rdmasock::fdt {

std::atomic<Slot *> g_top[kTopSize];

}  // namespace rdmasock::fdt
