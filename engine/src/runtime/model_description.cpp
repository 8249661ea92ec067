#include "longscope/model_description.h"

#include "longscope/model.h"
#include "longscope/tokenizer.h"
#include "runtime/rope_base.h"

#include <cstdio>

namespace longscope {

namespace {

// A factor as people write it: 2, 1.5, 32 (at most six significant digits).
std::string factor_text(float f)
{
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", double(f));
    return buf;
}

bool uses_original_context(RopeScalingType t)
{
    return t == RopeScalingType::Dynamic || t == RopeScalingType::Yarn || t == RopeScalingType::Llama3 ||
           t == RopeScalingType::LongRope;
}

std::string scaling_text(const HParams &hp, const RopeScaling &rs)
{
    std::string text(to_string(rs.type));
    if (rs.type == RopeScalingType::None)
        return text;
    text += " x" + factor_text(rs.factor);
    if (uses_original_context(rs.type))
        text += " (original context " + std::to_string(rs.orig_ctx > 0 ? rs.orig_ctx : hp.n_ctx_train) + ")";
    return text;
}

} // namespace

std::string describe_family(const HParams &hp)
{
    std::string text(to_string(hp.family));
    if (!hp.architecture.empty() && hp.architecture != text)
        text += " (architecture " + hp.architecture + ")";
    return text;
}

std::string describe_tokenizer(const Tokenizer &tok)
{
    if (tok.kind() == TokenizerKind::SentencePiece)
        return "sentencepiece";
    std::string text = "byte-level BPE";
    if (!tok.pre_tokenizer().empty())
        text += " (pre-tokenizer " + tok.pre_tokenizer() + ")";
    return text;
}

std::string describe_token(const Tokenizer &tok, int32_t id)
{
    return id < 0 ? std::string("none") : std::to_string(id) + " " + tok.piece(id);
}

std::string describe_end_of_generation(const Tokenizer &tok)
{
    std::string text;
    for (int32_t id : tok.end_of_generation_ids())
        text += (text.empty() ? "" : ", ") + describe_token(tok, id);
    return text.empty() ? std::string("none") : text;
}

RopeScaling rope_scaling_in_use(const HParams &hp, const RopeSettings &rope)
{
    return scaling_in_effect(hp, rope);
}

std::string describe_rope_scaling(const HParams &hp, const RopeSettings &rope)
{
    const std::string in_use = scaling_text(hp, scaling_in_effect(hp, rope));
    const std::string own = scaling_text(hp, hp.rope);
    return in_use == own ? in_use : in_use + "; the model's own: " + own;
}

ModelDescription describe_model(const Model &model, const RopeSettings &rope)
{
    const Tokenizer &tok = model.tokenizer();
    return {describe_family(model.hparams()), describe_tokenizer(tok), describe_end_of_generation(tok),
            describe_rope_scaling(model.hparams(), rope)};
}

} // namespace longscope
