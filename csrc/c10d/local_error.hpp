#pragma once

#include <exception>
#include <string>

#include <c10/util/Exception.h>

namespace dummy_collectives {

// Runs a collective's steps. An error of this rank alone (out of memory staging a tensor, a bug)
// leaves it out of the steps that remain: its peers would wait for them, or read its next
// collective's steps as this one's. So `failGroup(message)` fails the group for every rank. The
// group's own failures (DistBackendError: a dead peer, a timeout, an abort, a mismatch every
// rank raises alike) and bad arguments every rank finds alike (ValueError: all-to-all split
// sizes) pass through.
template <typename Body, typename FailGroup>
void failGroupOnLocalError(Body&& body, FailGroup&& failGroup) {
  try {
    body();
  } catch (const c10::DistBackendError&) {
    throw;
  } catch (const c10::ValueError&) {
    throw;
  } catch (const c10::Error& e) {
    failGroup(std::string(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    failGroup(std::string(e.what()));
  }
}

} // namespace dummy_collectives
