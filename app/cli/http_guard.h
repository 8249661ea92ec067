// The connections of `longscope-cli serve`, on top of cpp-httplib: limits that hold while a
// request arrives (its head's size and field count, a bound on its body's bytes whatever
// the transfer encoding, one deadline for the whole request), a bounded pool of workers that
// slow clients cannot hold while others wait, and what a handler may ask of its connection.
//
// httplib reads a request through a Stream; GuardedServer serves each connection with its own
// (GuardedStream, in http_guard.cpp), which counts what arrives and answers 408, 413 or 431
// itself (and closes) when a limit is passed, before httplib has buffered the excess.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>

namespace longscope::cli {

struct ConnectionLimits {
    using ms = std::chrono::milliseconds;
    size_t workers = 16;          // connections served at once (--max-connections)
    size_t waiting = 16;          // accepted connections waiting for a worker; beyond, 503 at once
    size_t max_body = 1 << 20;    // --max-body: the bytes of a body as it arrives are bounded by
                                  // twice this (chunk framing), the decoded body by the handler
    ms request_timeout{30000};    // a request's line, head and body, from its first byte
    ms idle_timeout{5000};        // waiting for a request's first byte (and between requests)
    ms busy_grace{1000};          // while connections wait for a worker: any request not fully
                                  // arrived this long after its wait began is dropped (408)
    ms write_timeout{30000};      // one write to the client
    size_t requests_per_connection = 100;
};

class ConnectionPool;

class GuardedServer : public httplib::Server {
public:
    explicit GuardedServer(const ConnectionLimits &limits);

    // About the connection of the request a handler serves (called on the handler's thread):
    // whether the client has closed it (or shut down its side)...
    static bool client_gone();
    // ...that it closes after this response (its body was not read: it cannot carry another
    // request)...
    static void close_after(httplib::Response &res);
    // ...and whether the guard answered this request itself (408, 413, 431): then httplib's
    // own answer is not sent, and not logged.
    static bool guard_answered();

private:
    bool process_and_close_socket(socket_t sock) override;

    ConnectionLimits m_limits;
    std::atomic<ConnectionPool *> m_pool{nullptr};
};

} // namespace longscope::cli
