// Fitting a prompt into the context limit. Below the generator and the chat layer, which
// both cut prompts: it needs only the token ids and the overflow policy.
#pragma once

#include "longscope/settings.h"

#include <cstdint>
#include <span>
#include <vector>

namespace longscope {

// Fits a prompt into `limit` tokens leaving `reserve` for generation. Error: throws
// ContextOverflow when it does not fit. HeadTail: keeps the first and the last halves of the
// budget (as the long-context benchmarks do), so the instruction at the start and the
// question at the end survive. DropOldestTurns is the chat layer's job and acts as Error here.
// Shift: the prompt is kept whole; the session shifts the context as it streams in.
std::vector<int32_t> fit_prompt(std::span<const int32_t> prompt, int limit, int reserve,
                                OverflowPolicy policy);

} // namespace longscope
