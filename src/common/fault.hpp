// SPDX-License-Identifier: BSD-3-Clause
// Fault injection for tests (docs/DESIGN.md, "Failure model"): the debug variable
//   LM_FAULT="<kind>:rank=<world rank>:nth=<n>[,<kind>:...]"     kind: alloc | transport
// makes the n-th call (counted from 1 in this process) of that kind on that world rank fail as a
// real failure would: "alloc" as an allocation that returns NULL (LM_ERR_OUT_OF_MEMORY),
// "transport" as a transport call that returns an MPI error (LM_ERR_MPI). Read once; no cost
// when unset beyond one branch.
#pragma once

namespace lm {

enum class FaultKind { Alloc = 0, Transport = 1 };

// True when this call of `kind` must fail (counts the call).
bool fault_hit(FaultKind kind);

}  // namespace lm
