#include "server_api.h"

#include "longscope/errors.h"
#include "remote/openai_client.h"
#include "remote/prometheus.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <random>
#include <set>

namespace longscope::cli::api {

ApiError::ApiError(int status, std::string message, std::string type, std::string param, std::string code)
    : std::runtime_error(std::move(message)), m_status(status), m_type(std::move(type)),
      m_param(std::move(param)), m_code(std::move(code))
{
}

json ApiError::body() const { return error_body(what(), m_type, m_param, m_code); }

ApiError ApiError::detached() const { return ApiError(m_status, std::string(what()), m_type, m_param, m_code); }

json error_body(std::string_view message, std::string_view type, std::string_view param, std::string_view code)
{
    json e;
    e["message"] = std::string(message);
    e["type"] = std::string(type);
    e["param"] = param.empty() ? json(nullptr) : json(std::string(param));
    e["code"] = code.empty() ? json(nullptr) : json(std::string(code));
    return json{{"error", e}};
}

namespace {

[[noreturn]] void bad(const std::string &param, const std::string &message, const std::string &code = {})
{
    throw ApiError(400, message, "invalid_request_error", param, code);
}

const char *type_name(const json &v)
{
    switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    default: return "an unsupported value";
    }
}

double number_in(const json &v, const std::string &name, double lo, double hi)
{
    if (!v.is_number())
        bad(name, "'" + name + "' must be a number, got " + type_name(v));
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < lo || d > hi)
        bad(name, "'" + name + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                      ", got " + v.dump());
    return d;
}

int64_t integer_in(const json &v, const std::string &name, int64_t lo, int64_t hi)
{
    int64_t i = 0;
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
            bad(name, "'" + name + "' is too large: " + v.dump());
        i = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
               v.get<double>() == std::floor(v.get<double>()) && std::abs(v.get<double>()) < 9e18) {
        i = int64_t(v.get<double>());
    } else {
        bad(name, "'" + name + "' must be an integer, got " + (v.is_number() ? v.dump() : type_name(v)));
    }
    if (i < lo || i > hi)
        bad(name, "'" + name + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                      ", got " + std::to_string(i));
    return i;
}

bool boolean(const json &v, const std::string &name)
{
    if (!v.is_boolean())
        bad(name, "'" + name + "' must be a boolean, got " + type_name(v));
    return v.get<bool>();
}

const std::string &string_of(const json &v, const std::string &name)
{
    if (!v.is_string())
        bad(name, "'" + name + "' must be a string, got " + type_name(v));
    return v.get_ref<const std::string &>();
}

// Message content: a string, or an array of {"type": "text", "text": ...} parts.
void check_content(const json &v, const std::string &name)
{
    if (v.is_null() || v.is_string())
        return;
    if (!v.is_array())
        bad(name, "'" + name + "' must be a string or an array of text parts, got " + type_name(v));
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string pname = name + "[" + std::to_string(i) + "]";
        const json &part = v[i];
        if (!part.is_object() || !part.contains("type") || part["type"] != "text" || !part.contains("text"))
            bad(pname, "'" + pname + "': only text content parts ({\"type\": \"text\", \"text\": ...}) are supported");
        string_of(part["text"], pname + ".text");
    }
}

// An assistant message's tool calls: [{"id", "type": "function", "function": {"name", "arguments"}}].
void check_tool_calls(const json &v, const std::string &name)
{
    if (!v.is_array())
        bad(name, "'" + name + "' must be an array, got " + type_name(v));
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string cname = name + "[" + std::to_string(i) + "]";
        const json &call = v[i];
        if (!call.is_object() || !call.contains("function") || !call["function"].is_object())
            bad(cname, "'" + cname + "' must be an object with a \"function\" object");
        const json &fn = call["function"];
        if (!fn.contains("name"))
            bad(cname + ".function.name", "'" + cname + ".function.name' is required");
        string_of(fn["name"], cname + ".function.name");
        if (fn.contains("arguments") && !fn["arguments"].is_string() && !fn["arguments"].is_object())
            bad(cname + ".function.arguments",
                "'" + cname + ".function.arguments' must be a JSON string or an object, got " + type_name(fn["arguments"]));
    }
}

// The messages, checked for shape; the template decides what a conversation may hold (an
// error it raises is answered by the caller). `in_order` is the same array with its keys in
// the order the client wrote them, which the template sees (tojson keeps it, as Python does).
std::vector<ChatMessage> parse_messages(const json &v, const nlohmann::ordered_json &in_order)
{
    if (!v.is_array())
        bad("messages", std::string("'messages' must be an array, got ") + type_name(v));
    if (v.empty())
        bad("messages", "'messages' must hold at least one message");
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string name = "messages[" + std::to_string(i) + "]";
        const json &m = v[i];
        if (!m.is_object())
            bad(name, "'" + name + "' must be an object, got " + std::string(type_name(m)));
        if (!m.contains("role"))
            bad(name + ".role", "'" + name + ".role' is required");
        const std::string &role = string_of(m["role"], name + ".role");
        if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
            bad(name + ".role",
                "'" + name + ".role' must be system, developer, user, assistant or tool, got '" + role + "'");
        if (auto c = m.find("content"); c != m.end())
            check_content(*c, name + ".content");
        if (auto r = m.find("reasoning_content"); r != m.end() && !r->is_null())
            string_of(*r, name + ".reasoning_content");
        if (auto t = m.find("tool_calls"); t != m.end() && !t->is_null())
            check_tool_calls(*t, name + ".tool_calls");
    }
    try {
        return parse_chat_messages(in_order.dump());
    } catch (const InvalidArgument &e) {
        bad("messages", e.what());
    }
}

// Tool definitions: [{"type": "function", "function": {"name", "description", "parameters"}}],
// handed on with their keys in the client's order.
std::string parse_tools(const json &v, const nlohmann::ordered_json &in_order)
{
    if (!v.is_array())
        bad("tools", std::string("'tools' must be an array, got ") + type_name(v));
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string name = "tools[" + std::to_string(i) + "]";
        const json &t = v[i];
        if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") ||
            !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
            bad(name, "'" + name + "' must be {\"type\": \"function\", \"function\": {\"name\": ..., ...}}");
    }
    return v.empty() ? std::string() : in_order.dump();
}

std::vector<int32_t> token_ids(const json &v, const std::string &name)
{
    std::vector<int32_t> ids;
    for (size_t i = 0; i < v.size(); ++i)
        ids.push_back(int32_t(integer_in(v[i], name + "[" + std::to_string(i) + "]", 0,
                                         std::numeric_limits<int32_t>::max())));
    return ids;
}

void parse_prompt(const json &v, CompletionRequest &r)
{
    if (v.is_string()) {
        r.prompt = v.get<std::string>();
        return;
    }
    if (v.is_array() && !v.empty()) {
        if (v.size() == 1 && v[0].is_string()) {
            r.prompt = v[0].get<std::string>();
            return;
        }
        if (v[0].is_number()) {
            r.prompt_ids = token_ids(v, "prompt");
            return;
        }
        if (v.size() == 1 && v[0].is_array() && !v[0].empty()) {
            r.prompt_ids = token_ids(v[0], "prompt[0]");
            return;
        }
        if (v.size() > 1 && (v[0].is_string() || v[0].is_array()))
            bad("prompt", "one prompt per request: 'prompt' must be a string (send one request per prompt)");
    }
    bad("prompt", std::string("'prompt' must be a string or an array of token ids, got ") +
                      (v.is_array() ? "an empty or mixed array" : type_name(v)));
}

// Fields OpenAI defines that this server does not implement: accepted only at their neutral value.
void check_neutral(const std::string &key, const json &v)
{
    if (v.is_null())
        return;
    if (key == "frequency_penalty" || key == "presence_penalty") {
        if (number_in(v, key, -2, 2) != 0)
            bad(key, "'" + key + "' is not supported (use 'repeat_penalty')");
    } else if (key == "logprobs") {
        if ((v.is_boolean() && v.get<bool>()) || (v.is_number() && v.get<double>() != 0) ||
            !(v.is_boolean() || v.is_number()))
            bad(key, "'logprobs' is not supported");
    } else if (key == "top_logprobs") {
        if (integer_in(v, key, 0, 20) != 0)
            bad(key, "'top_logprobs' is not supported");
    } else if (key == "logit_bias") {
        if (!v.is_object() || !v.empty())
            bad(key, "'logit_bias' is not supported");
    } else if (key == "response_format") {
        if (!v.is_object() || !v.contains("type") || v["type"] != "text")
            bad(key, "'response_format' other than {\"type\": \"text\"} is not supported");
    } else if (key == "functions") {
        if (!v.is_array() || !v.empty())
            bad(key, "'functions' is not supported (use 'tools')");
    } else if (key == "function_call") {
        if (!(v.is_string() && v.get<std::string>() == "none"))
            bad(key, "'function_call' is not supported (use 'tool_choice')");
    } else if (key == "best_of") {
        if (integer_in(v, key, 1, 20) != 1)
            bad(key, "'best_of' must be 1");
    } else if (key == "suffix") {
        if (!string_of(v, key).empty())
            bad(key, "'suffix' is not supported");
    } else if (key == "user") {
        string_of(v, key);
    }
}

const std::set<std::string> k_common_fields = {
    "model", "max_tokens", "temperature", "top_p", "stop", "seed", "stream", "stream_options", "n",
    "user", "frequency_penalty", "presence_penalty", "logprobs", "logit_bias",
    // extra fields of this server
    "top_k", "repeat_penalty", "ntk_alpha", "kv_before_rope", "memory_efficient_attention",
    "causal_flash", "kv_mode", "kv_type_k", "kv_type_v", "rope_scaling", "rope_factor", "rope_orig_ctx"};
const std::set<std::string> k_chat_fields = {"messages", "max_completion_tokens", "top_logprobs",
                                             "response_format", "tools", "tool_choice", "functions",
                                             "function_call"};
const std::set<std::string> k_completion_fields = {"prompt", "echo", "best_of", "suffix"};


} // namespace

void apply_settings_fields(const json &body, Settings &s)
{
    if (auto it = body.find("ntk_alpha"); it != body.end() && !it->is_null()) {
        if (it->is_string()) {
            if (it->get<std::string>() != "auto")
                bad("ntk_alpha", "'ntk_alpha' must be a number >= 1 or \"auto\", got " + it->dump());
            s.rope.ntk_auto = true;
        } else {
            if (!it->is_number())
                bad("ntk_alpha", std::string("'ntk_alpha' must be a number >= 1 or \"auto\", got ") + type_name(*it));
            const double a = it->get<double>();
            if (!std::isfinite(a) || a < 1 || a > 1e6)
                bad("ntk_alpha", "'ntk_alpha' must be a number >= 1 (at most 1e6) or \"auto\", got " + it->dump());
            s.rope.ntk_auto = false;
            s.rope.ntk_alpha = float(a);
        }
    }
    if (auto it = body.find("rope_scaling"); it != body.end() && !it->is_null()) {
        const std::string &m = string_of(*it, "rope_scaling");
        s.rope.scaling = parse_rope_scaling(m);
        if (!s.rope.scaling)
            bad("rope_scaling",
                "'rope_scaling' must be none, linear, ntk, dynamic, yarn, llama3 or longrope, got '" + m + "'");
    }
    if (auto it = body.find("rope_factor"); it != body.end() && !it->is_null()) {
        const double f = it->is_number() ? it->get<double>() : 0.0;
        if (!it->is_number() || !std::isfinite(f) || f < 1 || f > 1e6)
            bad("rope_factor", "'rope_factor' must be a number >= 1 (at most 1e6), got " + it->dump());
        s.rope.scaling_factor = float(f);
    }
    if (auto it = body.find("rope_orig_ctx"); it != body.end() && !it->is_null()) {
        if (!it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > (1 << 24))
            bad("rope_orig_ctx", "'rope_orig_ctx' must be an integer between 1 and 16777216, got " + it->dump());
        s.rope.scaling_orig_ctx = int(it->get<int64_t>());
    }
    if (auto it = body.find("kv_before_rope"); it != body.end() && !it->is_null())
        s.rope.store_kv_before_rope = boolean(*it, "kv_before_rope");
    if (auto it = body.find("memory_efficient_attention"); it != body.end() && !it->is_null())
        s.attention.memory_efficient = boolean(*it, "memory_efficient_attention");
    if (auto it = body.find("causal_flash"); it != body.end() && !it->is_null())
        s.attention.causal_flash = boolean(*it, "causal_flash");
    if (auto it = body.find("kv_mode"); it != body.end() && !it->is_null()) {
        const std::string &m = string_of(*it, "kv_mode");
        auto mode = parse_kv_mode(m);
        if (!mode)
            bad("kv_mode", "'kv_mode' must be none, concat, static or vmm, got '" + m + "'");
        s.kv_mode = *mode;
    }
    for (const auto &[key, field] : {std::pair{"kv_type_k", &s.kv_type_k}, std::pair{"kv_type_v", &s.kv_type_v}})
        if (auto it = body.find(key); it != body.end() && !it->is_null()) {
            const std::string &t = string_of(*it, key);
            auto type = parse_kv_type(t);
            if (!type)
                bad(key, "'" + std::string(key) + "' must be f32, f16, q8_0 or q4_0, got '" + t + "'");
            *field = *type;
        }
    try {
        s.validate();
    } catch (const InvalidArgument &e) {
        bad("", e.what());
    }
}

namespace {

// Parses a request body. A number too large for a double is refused naming the field it is
// the value of (the last key the parser met).
json parse_body(std::string_view body_text)
{
    if (remote::json_nesting_depth(body_text) > k_max_json_depth)
        throw ApiError(400, "the request body nests arrays and objects deeper than " + std::to_string(k_max_json_depth) +
                                " levels");
    std::string last_key;
    const json::parser_callback_t note_keys = [&](int depth, json::parse_event_t event, json &parsed) {
        if (event == json::parse_event_t::key && depth == 1)
            last_key = parsed.get<std::string>();
        return true;
    };
    try {
        return json::parse(body_text, note_keys);
    } catch (const json::parse_error &e) {
        throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what(), "invalid_request_error",
                       "", "invalid_json");
    } catch (const json::out_of_range &e) {
        if (last_key.empty())
            throw ApiError(400, std::string("the request body holds a number out of range: ") + e.what());
        bad(last_key, "'" + last_key + "' holds a number out of range: " + e.what());
    }
}

CompletionRequest parse_request_body(Endpoint endpoint, std::string_view body_text, const Settings &defaults)
{
    const json body = parse_body(body_text);
    if (!body.is_object())
        throw ApiError(400, std::string("the request body must be a JSON object, got ") + type_name(body));

    const auto &own = endpoint == Endpoint::Chat ? k_chat_fields : k_completion_fields;
    for (const auto &[key, value] : body.items())
        if (!k_common_fields.count(key) && !own.count(key))
            bad(key, "Unrecognized request argument supplied: " + key, "unknown_parameter");

    CompletionRequest r;
    r.endpoint = endpoint;
    r.settings = defaults;
    r.sampling.temperature = 1.0f;
    r.sampling.top_p = 1.0f;
    r.sampling.top_k = 0;
    r.sampling.repeat_penalty = 1.0f;

    auto get = [&](const char *key) -> const json * {
        auto it = body.find(key);
        return it == body.end() || it->is_null() ? nullptr : &*it;
    };

    if (endpoint == Endpoint::Chat) {
        const json *m = get("messages");
        if (!m)
            bad("messages", "'messages' is required");
        // The body again with its keys in order (its size and depth are already checked).
        const auto in_order = nlohmann::ordered_json::parse(body_text);
        r.messages = parse_messages(*m, in_order["messages"]);
        if (const json *t = get("tools"))
            r.tools_json = parse_tools(*t, in_order["tools"]);
        if (const json *c = get("tool_choice")) {
            if (!c->is_string() || (*c != "auto" && *c != "none"))
                bad("tool_choice", "'tool_choice' must be \"auto\" or \"none\" (a required or named tool is not "
                                   "supported), got " + c->dump());
            r.parse_tool_calls = *c == "auto";
        }
    } else {
        const json *p = get("prompt");
        if (!p)
            bad("prompt", "'prompt' is required");
        parse_prompt(*p, r);
    }
    if (const json *v = get("model"))
        r.model = string_of(*v, "model");
    // max_tokens 0 only with echo: the prompt scored, nothing generated.
    const bool echo = endpoint == Endpoint::Completion && get("echo") && get("echo")->is_boolean() &&
                      get("echo")->get<bool>();
    if (const json *v = get("max_tokens"))
        r.max_tokens = int(integer_in(*v, "max_tokens", echo ? 0 : 1, 1 << 24));
    if (const json *v = get("max_completion_tokens"))
        r.max_tokens = int(integer_in(*v, "max_completion_tokens", 1, 1 << 24));
    if (const json *v = get("temperature"))
        r.sampling.temperature = float(number_in(*v, "temperature", 0, 2));
    if (const json *v = get("top_p")) {
        const double p = number_in(*v, "top_p", 0, 1);
        if (p == 0)
            r.sampling.temperature = 0; // only the most likely token survives: greedy
        else
            r.sampling.top_p = float(p);
    }
    if (const json *v = get("top_k"))
        r.sampling.top_k = int(integer_in(*v, "top_k", 0, 1 << 24));
    if (const json *v = get("repeat_penalty"))
        r.sampling.repeat_penalty = float(number_in(*v, "repeat_penalty", 1e-3, 100));
    if (const json *v = get("seed")) {
        r.sampling.seed = uint64_t(integer_in(*v, "seed", std::numeric_limits<int64_t>::min(),
                                              std::numeric_limits<int64_t>::max()));
        r.seed_given = true;
    }
    if (const json *v = get("stop")) {
        if (v->is_string()) {
            r.stop.push_back(v->get<std::string>());
        } else if (v->is_array()) {
            if (v->size() > size_t(k_max_stop_sequences))
                bad("stop", "'stop' holds at most " + std::to_string(k_max_stop_sequences) + " sequences, got " +
                                std::to_string(v->size()));
            for (size_t i = 0; i < v->size(); ++i)
                r.stop.push_back(string_of((*v)[i], "stop[" + std::to_string(i) + "]"));
        } else {
            bad("stop", std::string("'stop' must be a string or an array of strings, got ") + type_name(*v));
        }
        std::erase_if(r.stop, [](const std::string &s) { return s.empty(); });
    }
    if (const json *v = get("stream"))
        r.stream = boolean(*v, "stream");
    if (const json *v = get("stream_options")) {
        if (!v->is_object())
            bad("stream_options", std::string("'stream_options' must be an object, got ") + type_name(*v));
        for (const auto &[key, value] : v->items()) {
            if (key != "include_usage")
                bad("stream_options." + key, "Unrecognized stream option: " + key, "unknown_parameter");
            if (!value.is_null())
                r.include_usage = boolean(value, "stream_options.include_usage");
        }
    }
    if (const json *v = get("n"))
        if (integer_in(*v, "n", 1, 128) != 1)
            bad("n", "'n' must be 1: this server generates one choice per request");
    if (endpoint == Endpoint::Completion) {
        if (const json *v = get("echo"))
            r.echo = boolean(*v, "echo");
        if (const json *v = get("logprobs"))
            r.logprobs = int(integer_in(*v, "logprobs", 0, k_max_logprobs));
        if (r.logprobs && r.stream)
            bad("logprobs", "'logprobs' is not supported with 'stream': ask without streaming");
    }
    for (const char *key : {"frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "logit_bias",
                            "response_format", "functions", "function_call",
                            "best_of", "suffix", "user"})
        if (const json *v = get(key); v && !(endpoint == Endpoint::Completion && std::string_view(key) == "logprobs"))
            check_neutral(key, *v);

    apply_settings_fields(body, r.settings);
    try {
        r.sampling.validate();
    } catch (const InvalidArgument &e) {
        bad("", e.what());
    }
    return r;
}

} // namespace

CompletionRequest parse_request(Endpoint endpoint, std::string_view body_text, const Settings &defaults)
{
    try {
        return parse_request_body(endpoint, body_text, defaults);
    } catch (const json::exception &e) {
        // A value of a type nlohmann-json cannot convert where a check above did not look
        // first: still the client's mistake.
        throw ApiError(400, std::string("invalid value in the request body: ") + e.what());
    }
}

ChatPrompt chat_prompt(const Model &model, const CompletionRequest &r, const std::string &template_text, int limit,
                       int reserve, OverflowPolicy policy)
{
    ChatRenderOptions o;
    o.tools_json = r.tools_json;
    o.template_text = template_text;
    o.fallback = false;
    try {
        return build_chat_prompt(model, r.messages, limit, reserve, policy, true, o);
    } catch (const FormatError &e) {
        throw ApiError(400, std::string("the chat template cannot render these messages: ") + e.what(),
                       "invalid_request_error", "messages", "template_error");
    }
}

ReplyFormat chat_reply_format(const Model &model, const CompletionRequest &r, const std::string &template_text,
                              const ChatPrompt &prompt)
{
    const std::string &used = prompt.format == "custom" ? template_text
                              : prompt.format == "model" ? model.info().chat_template
                                                         : std::string();
    return reply_format(used, prompt.text, !r.tools_json.empty() && r.parse_tool_calls);
}

json settings_json(const Settings &s)
{
    json j;
    j["ntk_alpha"] = s.rope.ntk_auto ? json("auto") : json(double(s.rope.ntk_alpha));
    j["rope_scaling"] = s.rope.scaling ? json(std::string(to_string(*s.rope.scaling))) : json("model");
    if (s.rope.scaling_factor > 0)
        j["rope_factor"] = s.rope.scaling_factor;
    if (s.rope.scaling_orig_ctx > 0)
        j["rope_orig_ctx"] = s.rope.scaling_orig_ctx;
    j["kv_before_rope"] = s.rope.store_kv_before_rope;
    j["memory_efficient_attention"] = s.attention.memory_efficient;
    j["causal_flash"] = s.attention.causal_flash;
    j["kv_mode"] = std::string(to_string(s.kv_mode));
    j["kv_type_k"] = std::string(to_string(s.kv_type_k));
    j["kv_type_v"] = std::string(to_string(s.kv_type_v));
    j["context_limit"] = s.context_limit;
    j["overflow"] = std::string(to_string(s.overflow));
    if (s.overflow == OverflowPolicy::Shift)
        j["sink_tokens"] = s.sink_tokens;
    return j;
}

std::string finish_reason(StopReason reason)
{
    if (reason == StopReason::StopString || reason == StopReason::EndOfSequence)
        return "stop";
    return "length";
}

json usage_json(const Usage &u)
{
    return json{{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

std::string new_id(Endpoint endpoint)
{
    static const char alphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::string id = endpoint == Endpoint::Chat ? "chatcmpl-" : "cmpl-";
    for (int i = 0; i < 24; ++i)
        id += alphabet[rng() % (sizeof(alphabet) - 1)];
    return id;
}

namespace {

json tool_calls_json(const std::vector<ToolCall> &calls, std::optional<size_t> first_index)
{
    json out = json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        std::string id = calls[i].id;
        if (id.empty())
            id = "call_" + new_id(Endpoint::Completion).substr(5);
        json c{{"id", id},
               {"type", "function"},
               {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
        if (first_index)
            c["index"] = *first_index + i;
        out.push_back(std::move(c));
    }
    return out;
}

} // namespace

std::string chat_finish_reason(const std::string &finish, bool called_tools)
{
    return called_tools && finish == "stop" ? "tool_calls" : finish;
}

json chat_response(const std::string &id, int64_t created, const std::string &model,
                   const ReplySplitter::Delta &reply, const std::string &finish, const Usage &usage)
{
    const bool called = !reply.tool_calls.empty();
    json message{{"role", "assistant"},
                 {"content", called && reply.content.empty() ? json(nullptr) : json(reply.content)}};
    if (!reply.reasoning.empty())
        message["reasoning_content"] = reply.reasoning;
    if (called)
        message["tool_calls"] = tool_calls_json(reply.tool_calls, std::nullopt);
    json choice{{"index", 0},
                {"message", message},
                {"logprobs", nullptr},
                {"finish_reason", chat_finish_reason(finish, called)}};
    return json{{"id", id},           {"object", "chat.completion"}, {"created", created},
                {"model", model},     {"choices", json::array({choice})}, {"usage", usage_json(usage)}};
}

json chat_reply_chunk(const std::string &id, int64_t created, const std::string &model,
                      const ReplySplitter::Delta &piece, size_t first_call)
{
    json delta = json::object();
    if (!piece.reasoning.empty())
        delta["reasoning_content"] = piece.reasoning;
    if (!piece.content.empty())
        delta["content"] = piece.content;
    if (!piece.tool_calls.empty())
        delta["tool_calls"] = tool_calls_json(piece.tool_calls, first_call);
    json choice{{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    return json{{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
                {"model", model}, {"choices", json::array({choice})}};
}

json completion_response(const std::string &id, int64_t created, const std::string &model, const std::string &text,
                         const std::string &finish, const Usage &usage, const json &logprobs)
{
    json choice{{"text", text}, {"index", 0}, {"logprobs", logprobs}, {"finish_reason", finish}};
    return json{{"id", id},           {"object", "text_completion"}, {"created", created},
                {"model", model},     {"choices", json::array({choice})}, {"usage", usage_json(usage)}};
}

json chat_chunk(const std::string &id, int64_t created, const std::string &model,
                const std::optional<std::string> &text, const std::optional<std::string> &finish, bool role)
{
    json delta = json::object();
    if (role)
        delta["role"] = "assistant";
    if (text)
        delta["content"] = *text;
    json choice{{"index", 0},
                {"delta", delta},
                {"logprobs", nullptr},
                {"finish_reason", finish ? json(*finish) : json(nullptr)}};
    return json{{"id", id},       {"object", "chat.completion.chunk"}, {"created", created},
                {"model", model}, {"choices", json::array({choice})}};
}

json completion_chunk(const std::string &id, int64_t created, const std::string &model, const std::string &text,
                      const std::optional<std::string> &finish)
{
    json choice{{"text", text},
                {"index", 0},
                {"logprobs", nullptr},
                {"finish_reason", finish ? json(*finish) : json(nullptr)}};
    return json{{"id", id},       {"object", "text_completion"}, {"created", created},
                {"model", model}, {"choices", json::array({choice})}};
}

json usage_chunk(Endpoint endpoint, const std::string &id, int64_t created, const std::string &model,
                 const Usage &usage)
{
    return json{{"id", id},
                {"object", endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion"},
                {"created", created},
                {"model", model},
                {"choices", json::array()},
                {"usage", usage_json(usage)}};
}

std::string dump(const json &j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json &j) { return "data: " + dump(j) + "\n\n"; }

json logprobs_json(const std::vector<TokenLogprob> &tokens, bool with_top, size_t first_offset)
{
    json texts = json::array(), values = json::array(), top = json::array(), offsets = json::array();
    size_t offset = first_offset;
    for (const TokenLogprob &t : tokens) {
        texts.push_back(t.text);
        values.push_back(t.logprob ? json(*t.logprob) : json(nullptr));
        if (with_top) {
            if (!t.logprob) {
                top.push_back(nullptr);
            } else {
                json alternatives = json::object();
                for (const auto &[text, lp] : t.top)
                    if (!alternatives.contains(text)) // two ids may spell the same text
                        alternatives[text] = lp;
                top.push_back(alternatives);
            }
        }
        offsets.push_back(offset);
        offset += t.text.size();
    }
    return json{{"tokens", texts},
                {"token_logprobs", values},
                {"top_logprobs", with_top ? top : json(nullptr)},
                {"text_offset", offsets}};
}

json model_object(const std::string &name, int64_t created, const ModelMeta &meta)
{
    json j{{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "longscope"}};
    if (meta.context_length > 0) {
        j["max_model_len"] = meta.context_length;
        j["context_length"] = meta.context_length;
    }
    if (!meta.architecture.empty())
        j["architecture"] = meta.architecture;
    if (meta.n_ctx_train > 0 || meta.n_vocab > 0)
        j["meta"] = json{{"n_ctx_train", meta.n_ctx_train}, {"n_vocab", meta.n_vocab}};
    return j;
}

namespace {

// A /tokenize or /detokenize body: an object, its "model" (when given) the served one.
json tokenizer_body(std::string_view body_text, const std::string &model_name)
{
    const json body = parse_body(body_text);
    if (!body.is_object())
        throw ApiError(400, "the request body must be a JSON object");
    if (const auto m = body.find("model"); m != body.end() && !m->is_null()) {
        if (!m->is_string())
            bad("model", "'model' must be a string");
        if (m->get<std::string>() != model_name)
            throw ApiError(404, "The model '" + m->get<std::string>() + "' does not exist; this server serves '" +
                                    model_name + "'",
                           "invalid_request_error", "model", "model_not_found");
    }
    return body;
}

bool flag_in(const json &body, const char *name, bool fallback)
{
    const auto it = body.find(name);
    if (it == body.end() || it->is_null())
        return fallback;
    if (!it->is_boolean())
        bad(name, std::string("'") + name + "' must be a boolean, got " + type_name(*it));
    return it->get<bool>();
}

} // namespace

json tokenize_response(const Tokenizer &tok, std::string_view body_text, const std::string &model_name, int n_ctx)
{
    const json body = tokenizer_body(body_text, model_name);
    const bool as_llama = body.contains("content");
    const json &text = as_llama ? body["content"] : body.contains("prompt") ? body["prompt"] : json();
    if (!text.is_string())
        bad(as_llama ? "content" : "prompt", text.is_null() ? "give the text to tokenize as 'content' or 'prompt'"
                                                            : std::string("the text to tokenize must be a string, got ") +
                                                                  type_name(text));
    const bool add_special = flag_in(body, "add_special", flag_in(body, "add_special_tokens", !as_llama));
    const std::vector<int32_t> ids = tok.encode(text.get<std::string>(), add_special && tok.add_bos_default());
    return json{{"tokens", ids}, {"count", ids.size()}, {"max_model_len", n_ctx}};
}

json detokenize_response(const Tokenizer &tok, int n_vocab, std::string_view body_text, const std::string &model_name)
{
    const json body = tokenizer_body(body_text, model_name);
    const auto it = body.find("tokens");
    if (it == body.end() || !it->is_array())
        bad("tokens", "give the token ids to detokenize as the array 'tokens'");
    const std::vector<int32_t> ids = token_ids(*it, "tokens");
    const int limit = std::min(tok.n_vocab(), n_vocab);
    for (size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= limit)
            bad("tokens", "token id " + std::to_string(ids[i]) + " at tokens[" + std::to_string(i) +
                              "] is outside the vocabulary of " + std::to_string(limit));
    const std::string text = tok.decode(ids);
    return json{{"content", text}, {"prompt", text}};
}

json models_list(const std::string &name, int64_t created, const ModelMeta &meta)
{
    return json{{"object", "list"}, {"data", json::array({model_object(name, created, meta)})}};
}

std::string prometheus_metrics(const ServerCounters &c, const std::string &model)
{
    using Labels = std::map<std::string, std::string>;
    remote::MetricsWriter w;
    const Labels m{{"model_name", model}};
    auto one = [&](const char *name, const char *type, const char *help, double v) {
        w.family(name, type, help);
        w.sample(name, v, m);
    };
    w.family("longscope:memory_bytes", "gauge",
             "The memory ledger after the latest step, by category (weights, kv_reserved, kv_resident, scratch, "
             "total, process_rss, device_used)");
    const std::pair<const char *, uint64_t> now[] = {
        {"weights", c.memory.weights},         {"kv_reserved", c.memory.kv_reserved},
        {"kv_resident", c.memory.kv_resident}, {"scratch", c.memory.scratch},
        {"total", c.memory.total},             {"process_rss", c.memory.process_rss},
        {"device_used", c.memory.device_used}};
    for (const auto &[category, bytes] : now)
        w.sample("longscope:memory_bytes", double(bytes), Labels{{"category", category}, {"model_name", model}});
    w.family("longscope:memory_peak_bytes", "gauge", "Peaks of the memory ledger since the server started");
    const std::pair<const char *, uint64_t> peaks[] = {{"kv_reserved", c.memory.peak_kv_reserved},
                                                       {"kv_resident", c.memory.peak_kv_resident},
                                                       {"scratch", c.memory.peak_scratch},
                                                       {"total", c.memory.peak_total}};
    for (const auto &[category, bytes] : peaks)
        w.sample("longscope:memory_peak_bytes", double(bytes), Labels{{"category", category}, {"model_name", model}});
    one("longscope:kv_cache_tokens", "gauge", "Tokens held in the KV cache", c.kv_tokens);
    one("longscope:context_limit_tokens", "gauge", "The context limit the server runs with", c.context_limit);
    one("longscope:kv_cache_usage_ratio", "gauge", "KV cache usage: tokens held over the context limit (0 to 1)",
        c.context_limit > 0 ? double(c.kv_tokens) / c.context_limit : 0.0);
    one("longscope:requests_running", "gauge", "Requests the engine is generating for", c.requests_running);
    one("longscope:requests_waiting", "gauge", "Requests queued for the engine", c.requests_waiting);
    one("longscope:requests_completed_total", "counter", "Requests the engine finished", double(c.requests_completed));
    one("longscope:prompt_tokens_total", "counter", "Prompt tokens evaluated (reused prefixes excluded)",
        double(c.prompt_tokens));
    one("longscope:prompt_tokens_cached_total", "counter", "Prompt tokens reused from the previous request's context",
        double(c.cached_prompt_tokens));
    one("longscope:generation_tokens_total", "counter", "Tokens generated", double(c.generation_tokens));
    one("longscope:prompt_tokens_per_second", "gauge", "Prefill throughput of the latest request",
        c.prompt_tokens_per_second);
    one("longscope:generation_tokens_per_second", "gauge", "Decode throughput of the latest request",
        c.generation_tokens_per_second);
    one("longscope:step_tokens_per_second", "gauge", "Throughput of the latest evaluation step",
        c.step_tokens_per_second);
    one("longscope:step_threads", "gauge",
        "CPU threads the latest evaluation step ran on (the decode thread tuner's choice)", c.step_threads);
    return w.text();
}

json metrics_json(const std::optional<StepMetrics> &last, const MemoryLedger &now)
{
    auto ledger = [](const MemoryLedger &m) {
        return json{{"weights", m.weights},
                    {"kv_reserved", m.kv_reserved},
                    {"kv_resident", m.kv_resident},
                    {"scratch", m.scratch},
                    {"total", m.total},
                    {"peak_kv_reserved", m.peak_kv_reserved},
                    {"peak_kv_resident", m.peak_kv_resident},
                    {"peak_scratch", m.peak_scratch},
                    {"peak_total", m.peak_total},
                    {"process_rss", m.process_rss},
                    {"kv_bytes_copied", m.kv_bytes_copied}};
    };
    json j;
    j["object"] = "metrics";
    if (last) {
        j["step"] = json{{"step", last->step},
                         {"phase", std::string(to_string(last->phase))},
                         {"n_tokens", last->n_tokens},
                         {"position", last->position},
                         {"seconds", last->seconds},
                         {"tokens_per_second", last->tokens_per_second},
                         {"threads", last->threads},
                         {"ntk_alpha", last->ntk_alpha},
                         {"rope_base", last->rope_base},
                         {"attention_tiles_skipped", last->attention_tiles_skipped},
                         {"settings", settings_json(last->settings)},
                         {"memory", ledger(last->memory)}};
    } else {
        j["step"] = nullptr;
    }
    j["memory"] = ledger(now);
    return j;
}

bool bearer_matches(std::string_view header, std::string_view key)
{
    auto trim = [](std::string_view s) {
        while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
            s.remove_prefix(1);
        while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
            s.remove_suffix(1);
        return s;
    };
    header = trim(header);
    constexpr std::string_view scheme = "bearer ";
    if (header.size() < scheme.size())
        return false;
    for (size_t i = 0; i < scheme.size(); ++i)
        if (std::tolower(static_cast<unsigned char>(header[i])) != scheme[i])
            return false;
    const std::string_view given = trim(header.substr(scheme.size()));
    // Constant time in the key's length: no early exit on the first differing byte.
    unsigned diff = given.size() == key.size() ? 0u : 1u;
    for (size_t i = 0; i < key.size(); ++i)
        diff |= static_cast<unsigned char>(key[i]) ^ static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    return diff == 0 && !key.empty();
}

size_t HeadMeter::feed(std::string_view bytes)
{
    size_t used = 0;
    while (used < bytes.size() && m_state == State::Reading) {
        const char ch = bytes[used++];
        ++m_bytes;
        if (ch != '\n') {
            ++m_line;
            if (m_lines > 0 && m_line > k_max_header_line) // the request line is httplib's (414)
                m_problem = "a header field is longer than " + std::to_string(k_max_header_line) + " bytes";
        } else {
            // An empty line ("\r\n" or "\n") after the request line ends the head.
            if (m_lines > 0 && m_line <= 1) {
                m_state = State::Complete;
                break;
            }
            ++m_lines;
            m_line = 0;
            if (m_lines - 1 > k_max_header_fields)
                m_problem = "the request has more than " + std::to_string(k_max_header_fields) + " header fields";
        }
        if (m_problem.empty() && m_bytes > k_max_head_bytes)
            m_problem = "the request line and header fields are longer than " + std::to_string(k_max_head_bytes) +
                        " bytes";
        if (!m_problem.empty())
            m_state = State::TooLarge;
    }
    return used;
}

namespace {

std::string lower(std::string_view s)
{
    std::string out(s);
    for (char &c : out)
        c = char(std::tolower(static_cast<unsigned char>(c)));
    return out;
}

std::string_view trim_ows(std::string_view s)
{
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
        s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t'))
        s.remove_suffix(1);
    return s;
}

bool all_digits(std::string_view s)
{
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// An IPv4-mapped IPv6 address ("::ffff:127.0.0.1") as its IPv4 address.
std::string_view unmapped(std::string_view address)
{
    constexpr std::string_view mapped = "::ffff:";
    if (address.size() > mapped.size() && lower(address.substr(0, mapped.size())) == mapped &&
        address.find('.') != std::string_view::npos)
        address.remove_prefix(mapped.size());
    return address;
}

} // namespace

std::optional<std::string> host_name(std::string_view value)
{
    value = trim_ows(value);
    std::string_view name, port;
    if (!value.empty() && value.front() == '[') {
        const size_t close = value.find(']');
        if (close == std::string_view::npos)
            return std::nullopt;
        name = value.substr(1, close - 1);
        const std::string_view rest = value.substr(close + 1);
        if (!rest.empty() && rest.front() != ':')
            return std::nullopt;
        port = rest.empty() ? rest : rest.substr(1);
        if (name.empty() || name.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
            return std::nullopt;
    } else {
        const size_t colon = value.find(':');
        name = value.substr(0, colon);
        port = colon == std::string_view::npos ? std::string_view() : value.substr(colon + 1);
        if (colon != std::string_view::npos && port.empty())
            return std::nullopt;
        // A registered name or an IPv4 address (RFC 3986's reg-name, without escapes).
        if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                   "0123456789-._~") != std::string_view::npos)
            return std::nullopt;
    }
    if (!port.empty() && (!all_digits(port) || port.size() > 5))
        return std::nullopt;
    return lower(name);
}

bool is_loopback_address(std::string_view address)
{
    address = unmapped(address);
    return address == "::1" || address.substr(0, 4) == "127.";
}

void check_host(const std::vector<std::string_view> &values, std::string_view local_address, const HostPolicy &policy)
{
    if (values.empty())
        throw ApiError(400, "the request has no Host header", "invalid_request_error", "", "invalid_host");
    if (values.size() > 1)
        throw ApiError(400, "the request has more than one Host header", "invalid_request_error", "", "invalid_host");
    const auto name = host_name(values.front());
    if (!name)
        throw ApiError(400, "the Host header is not a host name with an optional port: '" +
                                std::string(values.front().substr(0, 200)) + "'",
                       "invalid_request_error", "", "invalid_host");
    std::string bound = lower(policy.bound_host);
    if (bound.size() > 2 && bound.front() == '[' && bound.back() == ']')
        bound = bound.substr(1, bound.size() - 2);
    const std::string local = lower(unmapped(local_address));
    bool ok = *name == bound || *name == local || lower(unmapped(*name)) == local;
    if (is_loopback_address(local))
        ok = ok || *name == "localhost" || *name == "127.0.0.1" || *name == "::1";
    for (const std::string &a : policy.allowed)
        ok = ok || a == "*" || a == *name;
    if (!ok)
        throw ApiError(403,
                       "the Host header names '" + *name +
                           "', which is not this server's address; start the server with --allow-host " + *name +
                           " to accept it",
                       "invalid_request_error", "", "host_not_allowed");
}

BodyFraming check_body_framing(const std::vector<std::string_view> &content_length,
                               const std::vector<std::string_view> &transfer_encoding, size_t max_body)
{
    BodyFraming f;
    if (!transfer_encoding.empty()) {
        if (transfer_encoding.size() > 1 || lower(trim_ows(transfer_encoding.front())) != "chunked")
            throw ApiError(501, "Transfer-Encoding other than 'chunked' is not supported", "invalid_request_error", "",
                           "unsupported_transfer_encoding");
        if (!content_length.empty())
            throw ApiError(400, "the request has both Content-Length and Transfer-Encoding", "invalid_request_error", "",
                           "invalid_content_length");
        f.chunked = true;
        return f;
    }
    if (content_length.empty())
        throw ApiError(411, "the request has no Content-Length (nor Transfer-Encoding: chunked)",
                       "invalid_request_error", "", "length_required");
    for (size_t i = 0; i < content_length.size(); ++i) {
        const std::string_view v = trim_ows(content_length[i]);
        if (!all_digits(v) || v.size() > 18)
            throw ApiError(400, "Content-Length must be a decimal number of bytes, got '" + std::string(v.substr(0, 40)) +
                                    "'",
                           "invalid_request_error", "", "invalid_content_length");
        const uint64_t n = std::stoull(std::string(v));
        if (i > 0 && n != f.length)
            throw ApiError(400, "the request has Content-Length headers that disagree", "invalid_request_error", "",
                           "invalid_content_length");
        f.length = n;
    }
    if (f.length > max_body)
        throw ApiError(413,
                       "the request body is larger than the limit of " + std::to_string(max_body) + " bytes",
                       "invalid_request_error", "", "request_too_large");
    return f;
}

bool is_json_media_type(std::string_view content_type)
{
    const std::string_view type = trim_ows(content_type.substr(0, content_type.find(';')));
    return lower(type) == "application/json";
}

void check_json_content_type(const std::vector<std::string_view> &content_type)
{
    if (content_type.size() != 1 || !is_json_media_type(content_type.front()))
        throw ApiError(415,
                       "the request body must be JSON, sent with 'Content-Type: application/json'" +
                           (content_type.empty() ? std::string(" (there is none)")
                                                 : " (got '" + std::string(content_type.front().substr(0, 100)) + "')"),
                       "invalid_request_error", "", "unsupported_media_type");
}

} // namespace longscope::cli::api
