// The context limit the app runs with. A limit of 0 in the settings means the default: the
// model's trained context, at most longscope::k_default_ctx_cap tokens (what a session makes
// of it). Every place in the app that shows or uses the limit asks here.
#pragma once

#include "longscope/engine.h"

#include <algorithm>

namespace longscope::ui {

// The default limit for a model trained on `nCtxTrain` tokens.
inline int defaultContextLimit(int nCtxTrain)
{
    return std::min(nCtxTrain, longscope::k_default_ctx_cap);
}

// `requested` when set (above 0), else the default for the model.
inline int effectiveContextLimit(int requested, int nCtxTrain)
{
    return requested > 0 ? requested : defaultContextLimit(nCtxTrain);
}

} // namespace longscope::ui
