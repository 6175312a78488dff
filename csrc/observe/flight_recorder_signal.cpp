// A rank that torchrun stops writes its flight recorder dump first.
//
// When one rank of a torchrun job fails (it timed out waiting for a hung peer and raised, say),
// torchrun's agent sends SIGTERM to the job's other ranks, and SIGKILL after a grace period. The
// hung rank never reaches a point where it learns that its group failed, so without this its
// dump would be missing and torchfrtrace could not say which rank held the job up ("Missing
// dump files from ranks").
//
// Where a dump file is asked for (TORCH_FR_DUMP_TEMP_FILE or TORCH_NCCL_DEBUG_INFO_TEMP_FILE set:
// a plain SIGTERM, such as a cancelled job, writes nothing anywhere by default), the process's
// first group installs a SIGTERM handler, unless SIGTERM has a handler already (the program's,
// Python's or another library's is left alone). The handler only writes a byte to a pipe, all
// that is safe in a signal handler; a thread waiting on the pipe writes the dump, then restores
// the default disposition and raises SIGTERM again, so the process ends as it would have.

#include <dummy_collectives/flight_recorder.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>
#include <thread>

#include <dummy_collectives/debug_log.hpp>

namespace dummy_collectives {
namespace flight_recorder {
namespace {

int wakePipe[2] = {-1, -1};
volatile pid_t handlerOwner = 0; // the process whose thread waits on the pipe

void onSigterm(int signum) {
  if (::getpid() != handlerOwner) {
    // A forked child inherited the handler but not the thread that would act on it.
    ::signal(signum, SIG_DFL);
    ::raise(signum);
    return;
  }
  const char byte = 1;
  const ssize_t written = ::write(wakePipe[1], &byte, 1);
  (void)written; // nothing to do about a full pipe: a dump is on its way already
}

void dumpThenTerminate(const Group* group) {
  char byte = 0;
  while (::read(wakePipe[0], &byte, 1) < 0 && errno == EINTR) {
  }
  dumpOnFailure(group, "SIGTERM (the launcher stopped this rank)");
  ::signal(SIGTERM, SIG_DFL);
  ::kill(::getpid(), SIGTERM);
}

bool dumpFileAskedFor() {
  return std::getenv("TORCH_FR_DUMP_TEMP_FILE") != nullptr ||
      std::getenv("TORCH_NCCL_DEBUG_INFO_TEMP_FILE") != nullptr;
}

} // namespace

void dumpOnSigterm(const Group* group) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (group == nullptr || handlerOwner == ::getpid() || !dumpFileAskedFor()) {
    return;
  }
  struct sigaction current {};
  if (::sigaction(SIGTERM, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) {
    return;
  }
  if (wakePipe[0] >= 0) { // made by the parent of this forked process
    ::close(wakePipe[0]);
    ::close(wakePipe[1]);
  }
  if (::pipe2(wakePipe, O_CLOEXEC) != 0) {
    return;
  }
  std::thread(dumpThenTerminate, group).detach();
  handlerOwner = ::getpid();
  struct sigaction action {};
  action.sa_handler = onSigterm;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGTERM, &action, nullptr);
  DC_LOG(kInfo, group->globalRank, "flight recorder: SIGTERM writes this rank's dump first");
}

} // namespace flight_recorder
} // namespace dummy_collectives
