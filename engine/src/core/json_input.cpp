#include "core/json_input.h"

namespace longscope {

namespace {

using nlohmann::json;

struct TooDeep {};

// nlohmann's messages quote the token last read, which for a hostile file can be megabytes.
std::string cut(std::string s, size_t max_chars)
{
    if (s.size() <= max_chars)
        return s;
    s.resize(max_chars);
    return s + "...";
}

} // namespace

namespace {

template <class Json>
bool parse_bounded(const char *begin, const char *end, Json &out, std::string &why)
{
    // The callback sees each container open with the depth of its parent: the top level is 0.
    const typename Json::parser_callback_t bound = [](int depth, typename Json::parse_event_t event, Json &) {
        if ((event == Json::parse_event_t::object_start || event == Json::parse_event_t::array_start) &&
            depth >= kMaxJsonDepth)
            throw TooDeep{};
        return true;
    };
    try {
        out = Json::parse(begin, end, bound);
        return true;
    } catch (const TooDeep &) {
        why = "JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";
    } catch (const typename Json::exception &e) {
        why = "not valid JSON: " + cut(e.what(), 200);
    }
    return false;
}

} // namespace

bool parse_json_bounded(const char *begin, const char *end, json &out, std::string &why)
{
    return parse_bounded(begin, end, out, why);
}

bool parse_json_bounded(const char *begin, const char *end, nlohmann::ordered_json &out, std::string &why)
{
    return parse_bounded(begin, end, out, why);
}

std::string describe_json(const json &v, size_t max_chars)
{
    switch (v.type()) {
    case json::value_t::array:
        return "an array of " + std::to_string(v.size()) + (v.size() == 1 ? " element" : " elements");
    case json::value_t::object:
        return "an object of " + std::to_string(v.size()) + (v.size() == 1 ? " member" : " members");
    case json::value_t::string: {
        const std::string &s = v.get_ref<const std::string &>();
        if (s.size() <= max_chars)
            return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
        return json(s.substr(0, max_chars)).dump(-1, ' ', false, json::error_handler_t::replace) +
               "... (a string of " + std::to_string(s.size()) + " bytes)";
    }
    default:
        return cut(v.dump(), max_chars); // a number, true, false or null
    }
}

} // namespace longscope
