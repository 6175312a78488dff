// The precompiled header of both builds (setup.py and CMakeLists.txt), force-included into every
// C++ unit (not the .cu ones): parsing torch's headers is most of each unit's compile time.
// Only torch's headers belong here, not the project's: a change here recompiles every unit. A
// unit must still include what it uses: a build may go without this header.
#pragma once
// What this includes counts as system headers, as CMake's torch target already has them: GCC 12
// drops torch's own `#pragma GCC diagnostic` from a precompiled header, so the warnings those
// silence (-Wsign-compare in c10) would otherwise show in every unit.
#pragma GCC system_header

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/StringUtil.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
