// longscope-cli: generate, tokenize and inspect models from the command line.
#include "args.h"
#include "commands.h"

#include "longscope/backend.h"
#include "longscope/cpu_options.h"
#include "longscope/errors.h"
#include "longscope/hardware.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

const char *usage =
    "usage: longscope-cli COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  generate -m MODEL (-p TEXT | -f FILE | --batch-file FILE) [-n N] [--temp T]\n"
    "           [--top-k K] [--top-p P] [--repeat-penalty R] [--seed S] [--threads N]\n"
    "           [--ctx N] [--json] [--metrics FILE] [long-context options]\n"
    "  generate -m MODEL --chat FILE.json [--template FILE.jinja] [--format NAME] [--tools FILE.json]\n"
    "           [generate options]\n"
    "      Generate text. stdout carries only the generated text (or one JSON object with\n"
    "      --json); statistics go to stderr. --temp 0 is greedy. Defaults: -n 128, --temp 0.8,\n"
    "      --top-k 40, --top-p 0.95, --repeat-penalty 1 (off), a random seed (printed),\n"
    "      --ctx = the model's trained context (at most 4096; larger limits are allowed),\n"
    "      all hardware threads.\n"
    "      --batch-file: one prompt per line, generated together as one batch; one\n"
    "      completion per line on stdout (newlines written as \\n). --metrics FILE: one CSV\n"
    "      row per evaluation step (tokens/s and the memory ledger).\n"
    "  generate --remote URL [--api-key-env VAR] [-m NAME] (-p TEXT | -f FILE | --chat FILE.json)\n"
    "           [-n N] [--temp T] [--top-k K] [--top-p P] [--repeat-penalty R] [--seed S]\n"
    "           [--stop TEXT]... [--timeout S] [--json]\n"
    "      The same against an OpenAI-compatible server (vLLM, SGLang, TGI, llama-server,\n"
    "      longscope-cli serve): URL is http://HOST:PORT or .../v1; the key is read from the\n"
    "      environment variable VAR; -m names a model the server lists (default: its first).\n"
    "      The reply streams to stdout; time to first token and decode tokens/s, measured\n"
    "      here, go to stderr.\n"
    "  bench -m MODEL [--batch 1,4] [--input 128,512] [--new 64] [--kv none,concat,static,vmm]\n"
    "        [--attn naive,mem-efficient] [--causal-flash] [--kv-before-rope] [--threads N]\n"
    "        [--kv-type-k T] [--kv-type-v T]\n"
    "        [--ctx N] [--paired-probe] [--csv | --json]\n"
    "      Runs the grid and prints batch size, input and new tokens, prefill/decode/overall\n"
    "      tokens/s, KV reserved, KV and scratch peaks, peak total and bytes the KV cache copied,\n"
    "      with decode's fraction of the measured read bandwidth and prefill's roofline: the\n"
    "      time its matrix products and its attention would take at the measured peaks of\n"
    "      the instructions each runs on, over its time (--no-probe skips the probes).\n"
    "      --paired-probe also reads the probe's buffer once after every decode step and\n"
    "      reports the median of each step's read rate over that read (the bandwidth of\n"
    "      the moment, on a machine whose bandwidth moves).\n"
    "  perplexity -m MODEL -f FILE [--ctx N] [--stride S] [--batch B] [--bucket N]\n"
    "        [--max-tokens N] [--stream] [--csv FILE] [--json] [long-context options]\n"
    "      Negative log-likelihood of every token with up to N tokens of context, overall\n"
    "      and by position (buckets of N positions; * marks the trained-context edge).\n"
    "      The text is scored in steps of B tokens: auto alpha follows the length per step.\n"
    "      --stream (implied by --overflow shift): the text as one stream through one\n"
    "      context instead of windows; past the limit it shifts, or stops with the error.\n"
    "  perplexity --remote URL [--api-key-env VAR] [-m NAME] -f FILE [--ctx N] [--stride S]\n"
    "        [--max-tokens N] [--bucket N] [--csv FILE] [--json] [--timeout S]\n"
    "      The same from the server's prompt log-probabilities (/v1/completions with echo and\n"
    "      logprobs, as vLLM and longscope-cli serve give them), in the same windows (--ctx:\n"
    "      the server's context less one by default) from the server's /tokenize; a server\n"
    "      without /tokenize scores the text as one window (stderr says so).\n"
    "  passkey -m MODEL [--ctx N] [--lengths L1,L2] [--depths 0,0.25,0.5,0.75,1] [--trials T]\n"
    "        [--book FILE] [--needle TEXT --question TEXT --answer TEXT] [--seed S] [--batch B]\n"
    "        [--csv | --json] [long-context options]\n"
    "      Needle in a haystack over a grid of prompt lengths (tokens, default --ctx) x depths\n"
    "      (0..1): a pass key in filler text, or with --book a fact sentence in the book. Per\n"
    "      cell: the answer's probability (product of its tokens' teacher-forced probabilities,\n"
    "      mean over T trials) and the trials greedy decoding retrieved; * marks lengths past\n"
    "      the trained context. --csv prints the grid as CSV rows. --needle/--question/--answer:\n"
    "      a needle of your own (the answer is what should follow the question).\n"
    "  serve -m MODEL [--host 127.0.0.1] [--port 8080] [--api-key KEY] [--ctx N] [--threads N]\n"
    "        [--max-connections 16] [--max-queue 8] [--max-body 1048576] [--timeout 600]\n"
    "        [--request-timeout 30] [--allow-host NAME]... [--chat-template FILE.jinja]\n"
    "        [long-context options]\n"
    "      OpenAI-compatible HTTP API: POST /v1/chat/completions, POST /v1/completions\n"
    "      (streaming as server-sent events), GET /v1/models, /v1/metrics, /health. Requests\n"
    "      queue on the one engine; the long-context options are the defaults that the\n"
    "      request fields ntk_alpha, rope_scaling, rope_factor, rope_orig_ctx, kv_before_rope,\n"
    "      memory_efficient_attention, causal_flash, kv_mode, kv_type_k and kv_type_v override. --port 0 picks a free port; the address is printed on stderr.\n"
    "      With --api-key (or $LONGSCOPE_API_KEY) every endpoint but /health needs\n"
    "      'Authorization: Bearer KEY'. The Host header must name the bound address (or\n"
    "      localhost on loopback) unless --allow-host names it; POST bodies must be JSON\n"
    "      (Content-Type: application/json). SIGINT/SIGTERM stop it. See docs/serve.md.\n"
    "  template -m MODEL --messages FILE.json [--template FILE.jinja] [--format NAME]\n"
    "           [--tools FILE.json] [--no-generation-prompt]\n"
    "      Print the conversation rendered with the model's chat template exactly as it is\n"
    "      tokenized (nothing else on stdout); which template or built-in format was used, and\n"
    "      why, goes to stderr. FILE.json: OpenAI/Hugging Face messages (role, content as text\n"
    "      or parts, tool_calls, reasoning_content). --template renders FILE.jinja instead;\n"
    "      --format uses a built-in format (chatml, llama-2, llama-3, mistral-v7, gemma, ...).\n"
    "  tokenize -m MODEL [--bos] [--special] (TEXT | -f FILE)\n"
    "      Print the token ids, space separated, on one line. --special: text such as\n"
    "      <|im_start|> becomes its special token. MODEL may be a vocabulary-only GGUF.\n"
    "  info -m MODEL [--json]\n"
    "      Print the architecture, hyperparameters, tensors and vocabulary (tokenizer kind,\n"
    "      BOS/EOS, end-of-generation tokens); of a vocabulary-only GGUF, the tokenizer.\n"
    "  quantize IN OUT --type (q8_0|q4_0|q4_1|q5_0|q5_1|q2_k|q3_k|q4_k|q5_k|q6_k|iq4_nl|iq4_xs)\n"
    "      Write a copy of the GGUF model IN (F32/F16/BF16 weights) with its 2-D weights\n"
    "      quantized; q2_k, q3_k, q4_k and q5_k are llama.cpp's Q2_K, Q3_K_M, Q4_K_M and\n"
    "      Q5_K_M mixes (output, attn_v, ffn_down, attn_output with more bits). Rows that do not\n"
    "      divide into 256 take llama.cpp's 32-value fallback (q4_k: Q5_0, ...); weights whose\n"
    "      rows do not divide into whole blocks even so, and norms, are kept.\n"
    "  make-model --shape (tinyllama-1.1b|llama2-7b|stories260k|llama3.2-1b|qwen2.5-0.5b|qwen3-0.6b|\n"
    "                      gemma3-1b|phi3-mini|DIM:LAYERS:HEADS:KV_HEADS:FFN:VOCAB)\n"
    "        [--type f32|f16|bf16|TYPE as for quantize] [--vocab tokenizer.model|vocab.gguf]\n"
    "        [--seed S] [--ctx N] [--name NAME] -o FILE\n"
    "      Write a GGUF model of that shape and family (llama, qwen2, qwen3, gemma3, phi3, with\n"
    "      their tensors and keys) with random normal(0, 0.02) weights (norms 1),\n"
    "      streamed tensor by tensor; the vocabulary from --vocab, else byte-level.\n"
    "      Defaults: --type f16, --seed 0, --ctx the shape's (2048 for DIM:...).\n"
    "\n"
    "long-context options (each switchable live in the app):\n"
    "  --alpha (FLOAT|auto)  NTK-aware RoPE alpha >= 1, or auto from the length (default 1)\n"
    "  --rope-scaling (none|linear|ntk|dynamic|yarn|llama3|longrope)  RoPE position scaling\n"
    "                        (default: the model file's own; docs/long-context.md)\n"
    "  --rope-factor F       the method's factor (default the file's); --rope-orig-ctx N its\n"
    "                        original context (default the file's, else the trained context)\n"
    "  --kv-before-rope      cache keys before RoPE, rotate them inside attention\n"
    "  --attn (naive|mem-efficient)  attention kind (default naive)\n"
    "  --causal-flash        causality from positions, masked tiles skipped\n"
    "  --kv (none|concat|static|vmm) KV cache mode (default static)\n"
    "  --kv-type-k / --kv-type-v (f32|f16|q8_0|q4_0)  how keys / values are cached (default\n"
    "                        f32; q8_0 and q4_0 are ggml's blocks of 32, 34 and 18 bytes per\n"
    "                        block, and need a head size that is a multiple of 32; CPU only)\n"
    "  --overflow (error|head-tail|shift)  over-long prompts: fail, keep head and tail\n"
    "                        halves, or shift: keep the first tokens (sinks) and the most\n"
    "                        recent, drop the middle whenever the context is full (endless)\n"
    "  --sinks N             tokens the shift never drops (default 4)\n"
    "  --shift-discard N     tokens dropped per shift (default half of those after the sinks)\n"
    "  --backend (cpu|cuda)  where the forward pass runs (default cpu; cuda needs the plugin\n"
    "                        and a GPU, and runs one sequence: not with --batch-file)\n"
    "\n"
    "MODEL is a .gguf file or a Hugging Face LLaMA directory; without -m the bundled\n"
    "stories260K model is used (or $LONGSCOPE_MODEL).\n"
    "\n"
    "  --version   print the version\n"
    "  --help      print this help\n";

} // namespace

int main(int argc, char **argv)
{
    // The engine reads no environment variable: the switches it documents (docs/performance.md,
    // docs/cuda.md) are read here, before any model is loaded or backend probed.
    longscope::set_cpu_options(longscope::cpu_options_from_switches([](const char *name) { return std::getenv(name); }));
    if (const char *plugin = std::getenv("LONGSCOPE_CUDA_PLUGIN"); plugin && *plugin)
        longscope::set_backend_options(longscope::BackendOptions{plugin});
    std::vector<std::string> args(argv + 1, argv + argc);
    if (args.empty()) {
        std::fputs(usage, stderr);
        return 2;
    }
    const std::string cmd = args.front();
    args.erase(args.begin());
    if (cmd == "--help" || cmd == "-h" || cmd == "help") {
        std::fputs(usage, stdout);
        return 0;
    }
    if (cmd == "--version") {
        std::printf("longscope-cli %s\n", LONGSCOPE_VERSION);
        return 0;
    }
    for (const std::string &a : args)
        if (a == "--help" || a == "-h") {
            std::fputs(usage, stdout);
            return 0;
        }
    // Commands that run a model say once when only the slow portable kernels can run.
    if (cmd == "generate" || cmd == "bench" || cmd == "perplexity" || cmd == "passkey" || cmd == "serve")
        if (const std::string w = longscope::cpu_kernel_warning(); !w.empty())
            std::fprintf(stderr, "longscope-cli: warning: %s\n", w.c_str());
    try {
        if (cmd == "generate")
            return longscope::cli::cmd_generate(args, argv[0]);
        if (cmd == "template")
            return longscope::cli::cmd_template(args, argv[0]);
        if (cmd == "tokenize")
            return longscope::cli::cmd_tokenize(args, argv[0]);
        if (cmd == "info")
            return longscope::cli::cmd_info(args, argv[0]);
        if (cmd == "bench")
            return longscope::cli::cmd_bench(args, argv[0]);
        if (cmd == "perplexity")
            return longscope::cli::cmd_perplexity(args, argv[0]);
        if (cmd == "passkey")
            return longscope::cli::cmd_passkey(args, argv[0]);
        if (cmd == "quantize")
            return longscope::cli::cmd_quantize(args, argv[0]);
        if (cmd == "make-model")
            return longscope::cli::cmd_make_model(args, argv[0]);
        if (cmd == "serve")
            return longscope::cli::cmd_serve(args, argv[0]);
        std::fprintf(stderr, "longscope-cli: unknown command '%s' (try --help)\n", cmd.c_str());
        return 2;
    } catch (const longscope::cli::UsageError &e) {
        std::fprintf(stderr, "longscope-cli %s: %s (try --help)\n", cmd.c_str(), e.what());
        return 2;
    } catch (const longscope::Error &e) {
        std::fprintf(stderr, "longscope-cli %s: error: %s\n", cmd.c_str(), e.what());
        return 1;
    } catch (const std::bad_alloc &) {
        std::fprintf(stderr, "longscope-cli %s: error: out of memory\n", cmd.c_str());
        return 1;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "longscope-cli %s: error: %s\n", cmd.c_str(), e.what());
        return 1;
    }
}
