// A reply's reasoning apart from its answer: what a thinking model (Qwen3, QwQ, DeepSeek-R1)
// writes between <think> and </think> before answering. The chat view shows it collapsed.
#pragma once

#include <QString>

namespace longscope::ui {

struct ThoughtSplit {
    QString reasoning;          // between the tags, whitespace next to them dropped
    QString answer;             // the rest: what the model says
    bool hasReasoning = false;  // the reply opens with <think> (or closes a </think> it began in)
    bool thinking = false;      // the reasoning is not closed yet (still streaming, or cut off)
};

// Splits a reply as the engine splits it for the server (longscope::ReplySplitter). A reply
// that holds "</think>" with no "<think>" before it began inside a <think> that the prompt
// opened (DeepSeek-R1's generation prompt): the text before it is the reasoning.
ThoughtSplit splitThought(const QString &reply);

} // namespace longscope::ui
