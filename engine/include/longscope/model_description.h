// What a model is, in words: its family, its tokenizer, the tokens that end a reply and the
// RoPE scaling a session runs it with. `longscope-cli info` and the app's model header and
// Model Info show these same texts, written here once.
#pragma once

#include "longscope/hparams.h"
#include "longscope/settings.h"

#include <cstdint>
#include <string>

namespace longscope {

class Model;
class Tokenizer;

struct ModelDescription {
    std::string family;            // "llama"; "llama (architecture mistral)" when the file says otherwise
    std::string tokenizer;         // "sentencepiece", "byte-level BPE (pre-tokenizer qwen2)"
    std::string end_of_generation; // "2 </s>", "151643 <|endoftext|>, 151645 <|im_end|>"
    std::string rope_scaling;      // describe_rope_scaling's text
};

// The architecture family, with the file's own name for it when that differs.
std::string describe_family(const HParams &hp);
// The tokenizer's kind, with the pre-tokenizer of a byte-level BPE.
std::string describe_tokenizer(const Tokenizer &tok);
// "ID TEXT" of one token, "none" for a negative id.
std::string describe_token(const Tokenizer &tok, int32_t id);
// Every end-of-generation token (Tokenizer::end_of_generation_ids), "ID TEXT" each, comma
// separated; "none" when there is none.
std::string describe_end_of_generation(const Tokenizer &tok);

// The RoPE scaling in effect for `rope` (Settings::rope): the model's own unless the settings
// choose a method, with the settings' factor and original context where set.
RopeScaling rope_scaling_in_use(const HParams &hp, const RopeSettings &rope = {});
// "none", "linear x2", "yarn x4 (original context 2048)" (the original context is said for the
// methods that use it: dynamic, YaRN, llama3, LongRoPE). When the settings choose another
// scaling than the model's own, the model's own follows: "linear x2; the model's own: none".
std::string describe_rope_scaling(const HParams &hp, const RopeSettings &rope = {});

ModelDescription describe_model(const Model &model, const RopeSettings &rope = {});

} // namespace longscope
