#include "remote_http.h"

#include <httplib.h>

#include <chrono>
#include <memory>

namespace longscope::cli {

using remote::ClientError;
using remote::Failure;

namespace {

httplib::Headers headers_for(const std::string &key)
{
    httplib::Headers h;
    for (const auto &[name, value] : remote::request_headers(key))
        h.emplace(name, value);
    return h;
}

} // namespace

RemoteHttp::RemoteHttp(const std::string &url, std::string api_key, double timeout_s)
    : m_url(url), m_base(remote::parse_base_url(url)), m_key(std::move(api_key)), m_timeout_s(timeout_s)
{
}

namespace {

double since(std::chrono::steady_clock::time_point t)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::unique_ptr<httplib::Client> client_for(const remote::BaseUrl &base, double timeout_s)
{
    auto c = std::make_unique<httplib::Client>(base.origin());
    const auto t = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::duration<double>(timeout_s));
    c->set_connection_timeout(t);
    c->set_read_timeout(t);
    c->set_write_timeout(t);
    return c;
}

// A transport failure as the sentence a user reads; `waited` the seconds the call took.
ClientError transport_error(httplib::Error e, const std::string &url, double timeout_s, double waited)
{
    if ((e == httplib::Error::Read || e == httplib::Error::Write) && waited >= timeout_s * 0.9)
        return remote::timeout_error(url, timeout_s);
    if (e == httplib::Error::Read || e == httplib::Error::Write) {
        // A read that timed out and a connection reset look alike here; either way no answer came.
        return remote::connection_error(url, "the connection failed while waiting for the answer (" +
                                                 httplib::to_string(e) + ")");
    }
    switch (e) {
    case httplib::Error::ConnectionTimeout: return remote::timeout_error(url, timeout_s);
    case httplib::Error::Connection:
        return remote::connection_error(url, "the connection was refused, or the host cannot be reached");
    case httplib::Error::SSLConnection: return remote::connection_error(url, "the TLS handshake failed");
    case httplib::Error::SSLServerVerification:
        return remote::connection_error(url, "the server's TLS certificate could not be verified");
    default: return remote::connection_error(url, httplib::to_string(e));
    }
}

} // namespace

std::string RemoteHttp::get(const std::string &path, const std::string &model) const
{
    auto c = client_for(m_base, m_timeout_s);
    const auto start = std::chrono::steady_clock::now();
    const httplib::Result r = c->Get(path, headers_for(m_key));
    if (!r)
        throw transport_error(r.error(), m_url, m_timeout_s, since(start));
    if (r->status != 200)
        throw remote::http_error(r->status, r->body, model, m_url);
    return r->body;
}

std::string RemoteHttp::post(const std::string &path, const remote::json &body, const std::string &model) const
{
    auto c = client_for(m_base, m_timeout_s);
    httplib::Headers h = headers_for(m_key);
    h.erase("Content-Type"); // httplib sets it from the argument
    const auto start = std::chrono::steady_clock::now();
    const httplib::Result r = c->Post(path, h, body.dump(), "application/json");
    if (!r)
        throw transport_error(r.error(), m_url, m_timeout_s, since(start));
    if (r->status != 200)
        throw remote::http_error(r->status, r->body, model, m_url);
    return r->body;
}

remote::StreamState RemoteHttp::stream(const std::string &path, const remote::json &body, const std::string &model,
                                       const std::function<bool(const std::string &)> &on_text) const
{
    auto c = client_for(m_base, m_timeout_s);
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.headers = headers_for(m_key);
    req.body = body.dump();
    int status = 0;
    std::string error_body;
    remote::SseDecoder sse;
    remote::StreamState state;
    bool stopped = false;
    std::optional<ClientError> failure;
    const auto start = std::chrono::steady_clock::now();
    auto last_data = start;
    req.response_handler = [&](const httplib::Response &res) {
        status = res.status;
        return true;
    };
    req.content_receiver = [&](const char *data, size_t n, uint64_t, uint64_t) {
        last_data = std::chrono::steady_clock::now();
        if (status != 200) {
            error_body.append(data, std::min(n, size_t(65536) - std::min(error_body.size(), size_t(65536))));
            return true;
        }
        try {
            for (const std::string &event : sse.feed(std::string_view(data, n))) {
                const std::string text = state.feed(event);
                if (!text.empty() && !on_text(text)) {
                    stopped = true;
                    return false;
                }
            }
        } catch (const ClientError &e) {
            failure = e;
            return false;
        }
        return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    const bool ok = c->send(req, res, err);
    if (failure)
        throw *failure;
    if (stopped)
        return state;
    if (status != 0 && status != 200)
        throw remote::http_error(status, error_body, model, m_url);
    if (!ok) {
        if (status == 200 && since(last_data) >= m_timeout_s * 0.9) // the answer began, then stalled
            throw remote::timeout_error(m_url, m_timeout_s);
        if (status == 200) // the answer began, then the connection went
            throw remote::dropped_stream_error(m_url, state.text().size());
        throw transport_error(err, m_url, m_timeout_s, since(start));
    }
    if (!state.finished())
        throw remote::dropped_stream_error(m_url, state.text().size());
    return state;
}

remote::RemoteModel RemoteHttp::pick_model(const std::string &wanted) const
{
    const std::vector<remote::RemoteModel> models = remote::parse_models(get(m_base.api("/models")));
    if (models.empty())
        throw ClientError(Failure::ModelNotFound, "the server at " + m_url + " lists no model");
    if (wanted.empty())
        return models.front();
    std::string names;
    for (const remote::RemoteModel &m : models) {
        if (m.id == wanted)
            return m;
        names += (names.empty() ? "" : ", ") + m.id;
    }
    throw ClientError(Failure::ModelNotFound,
                      "the server at " + m_url + " has no model '" + wanted + "' (it serves: " + names + ")");
}

} // namespace longscope::cli
