#include "longscope/prompt_fit.h"

#include "longscope/errors.h"

#include <algorithm>
#include <string>

namespace longscope {

std::vector<int32_t> fit_prompt(std::span<const int32_t> prompt, int limit, int reserve,
                                OverflowPolicy policy)
{
    if (limit <= 0)
        throw InvalidArgument("the context limit must be positive");
    const int64_t budget = std::max<int64_t>(1, int64_t(limit) - std::max(0, reserve));
    if (int64_t(prompt.size()) <= budget || policy == OverflowPolicy::Shift)
        return {prompt.begin(), prompt.end()};
    if (policy != OverflowPolicy::HeadTail)
        throw ContextOverflow("the prompt has " + std::to_string(prompt.size()) +
                              " tokens, more than the " + std::to_string(budget) +
                              " that fit in the context limit of " + std::to_string(limit) +
                              (reserve > 0 ? " with " + std::to_string(reserve) + " left for the reply" : std::string()) +
                              " (raise the limit, or keep the head and tail of the prompt)");
    const size_t head = size_t(budget / 2), tail = size_t(budget) - head;
    std::vector<int32_t> out(prompt.begin(), prompt.begin() + std::ptrdiff_t(head));
    out.insert(out.end(), prompt.end() - std::ptrdiff_t(tail), prompt.end());
    return out;
}

} // namespace longscope
