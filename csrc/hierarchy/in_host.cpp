#include <dummy_collectives/hierarchy/in_host.hpp>

namespace dummy_collectives::hierarchy {

void InHostLevel::wait(const c10::intrusive_ptr<c10d::Work>& work, const OpContext& ctx) const {
  ctx.step();
  try {
    work->wait();
  } catch (const std::exception& e) {
    // Another host's failure reaches this host as an abort whose reason the group agreed on.
    std::string reason = health_.brokenReason();
    if (reason.empty()) {
      reason = brokenReason_();
    }
    health_.fail(ctx.describe(), reason.empty() ? std::string(e.what()) : reason);
  }
}

} // namespace dummy_collectives::hierarchy
