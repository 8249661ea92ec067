#include "http_guard.h"

#include "server_api.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <netdb.h>
#include <poll.h>
#include <string>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace longscope::cli {

using clock_type = std::chrono::steady_clock;
using std::chrono::milliseconds;

// A fixed set of workers serving connections in the order they were accepted. At most
// `waiting` connections wait for a busy worker; a further one is answered 503 at once on the
// accepting thread. While one waits that no idle worker is about to take, the pool is "under
// load": the workers then drop requests that are slow to arrive (GuardedStream).
class ConnectionPool : public httplib::TaskQueue {
public:
    ConnectionPool(size_t workers, size_t waiting) : m_workers(workers), m_max_waiting(waiting)
    {
        for (size_t i = 0; i < workers; ++i)
            m_threads.emplace_back([this] { work(); });
        // Ready when every worker waits for a connection (the first ones are not refused).
        std::unique_lock<std::mutex> lk(m_mutex);
        m_ready.wait(lk, [&] { return m_idle.load() == m_workers; });
    }
    ~ConnectionPool() override = default;

    void enqueue(std::function<void()> fn) override;
    void shutdown() override
    {
        {
            std::lock_guard<std::mutex> lk(m_mutex);
            m_shutdown = true;
        }
        m_cv.notify_all();
        for (auto &t : m_threads)
            t.join();
    }

    bool under_load() const { return m_under_load.load(); }

private:
    void work()
    {
        for (;;) {
            std::function<void()> fn;
            {
                std::unique_lock<std::mutex> lk(m_mutex);
                if (++m_idle == m_workers)
                    m_ready.notify_all();
                m_cv.wait(lk, [&] { return m_shutdown || !m_jobs.empty(); });
                --m_idle;
                if (m_jobs.empty())
                    return;
                fn = std::move(m_jobs.front());
                m_jobs.pop_front();
                update_load();
            }
            fn();
        }
    }

    const size_t m_workers;
    const size_t m_max_waiting;
    std::vector<std::thread> m_threads;
    std::mutex m_mutex;
    std::condition_variable m_cv;
    std::condition_variable m_ready;
    std::deque<std::function<void()>> m_jobs;
    bool m_shutdown = false;
    std::atomic<size_t> m_idle{0}; // workers waiting for a connection (or woken, not yet running)
    std::atomic<bool> m_under_load{false};

    // A connection waits that no idle worker is about to take (with m_mutex held).
    void update_load() { m_under_load = m_jobs.size() > m_idle.load(); }
};

namespace {

// Set while the accepting thread runs a connection the pool has no room for.
thread_local bool t_refuse = false;

// "HTTP/1.1 STATUS" with OpenAI's error body, closing the connection.
std::string error_response(int status, const char *reason, const std::string &message, const std::string &code)
{
    const std::string body = api::dump(api::error_body(message, status >= 500 ? "server_error" : "invalid_request_error",
                                                       "", code));
    std::string r = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                    "\r\nContent-Type: application/json\r\nConnection: close\r\n";
    if (status == 503)
        r += "Retry-After: 1\r\n";
    return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Sends all of `data` within `timeout` (best effort: the connection closes after it).
void send_all(socket_t sock, const std::string &data, milliseconds timeout)
{
    const auto end = clock_type::now() + timeout;
    size_t sent = 0;
    while (sent < data.size() && clock_type::now() < end) {
        pollfd p{sock, POLLOUT, 0};
        if (poll(&p, 1, 50) <= 0)
            continue;
        const ssize_t n = send(sock, data.data() + sent, data.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            return;
        if (n > 0)
            sent += size_t(n);
    }
}

// Reads and discards what the client still sends after its answer, until it closes, for at
// most `timeout` and `max_bytes`, and not while `stop()` says so: closing with unread bytes
// resets the connection, and a client still sending its body (most do before they read)
// would lose the answer.
void drain(socket_t sock, milliseconds timeout, size_t max_bytes, const std::function<bool()> &stop)
{
    const auto end = clock_type::now() + timeout;
    std::array<char, 16384> buf;
    size_t total = 0;
    while (total < max_bytes && clock_type::now() < end && !(stop && stop())) {
        pollfd p{sock, POLLIN, 0};
        const int r = poll(&p, 1, 50);
        if (r < 0 && errno != EINTR)
            return;
        if (r <= 0)
            continue;
        const ssize_t n = recv(sock, buf.data(), buf.size(), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
            return;
        total += size_t(std::max<ssize_t>(n, 0));
    }
}

void close_socket(socket_t sock)
{
    shutdown(sock, SHUT_RDWR);
    close(sock);
}

bool numeric_name(int (*get)(int, sockaddr *, socklen_t *), socket_t sock, std::string &ip, int &port)
{
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (get(sock, reinterpret_cast<sockaddr *>(&addr), &len) != 0)
        return false;
    std::array<char, NI_MAXHOST> host{};
    std::array<char, NI_MAXSERV> serv{};
    if (getnameinfo(reinterpret_cast<sockaddr *>(&addr), len, host.data(), host.size(), serv.data(), serv.size(),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return false;
    ip = host.data();
    port = std::atoi(serv.data());
    return true;
}

} // namespace

void ConnectionPool::enqueue(std::function<void()> fn)
{
    {
        std::lock_guard<std::mutex> lk(m_mutex);
        if (m_jobs.size() < m_max_waiting + m_idle.load()) {
            m_jobs.push_back(std::move(fn));
            update_load();
            m_cv.notify_one();
            return;
        }
    }
    t_refuse = true;
    fn();
    t_refuse = false;
}

// One connection as httplib reads and writes it: buffered reads that count the request's
// head (HeadMeter) and body bytes, waits bounded by the request's deadline, and the guard's
// own answers when a limit is passed.
class GuardedStream : public httplib::Stream {
public:
    GuardedStream(socket_t sock, const ConnectionLimits &limits, const std::atomic<socket_t> &listening,
                  const ConnectionPool *pool)
        : m_sock(sock), m_limits(limits), m_listening(listening), m_pool(pool),
          m_body_cap(2 * limits.max_body + 64 * 1024), m_wait_started(clock_type::now())
    {
    }

    // Waits for the first byte of the next request (false: the client closed, stayed idle
    // too long, or the server is busy or stopping); then starts its deadline.
    bool next_request()
    {
        if (m_failed)
            return false;
        if (m_off == m_len) {
            for (;;) {
                const auto now = clock_type::now();
                if (stopping() || now - m_wait_started >= m_limits.idle_timeout || busy_and_late(now))
                    return false;
                pollfd p{m_sock, POLLIN, 0};
                const int r = poll(&p, 1, 50);
                if (r > 0)
                    break;
                if (r < 0 && errno != EINTR)
                    return false;
            }
        }
        m_head = api::HeadMeter{};
        m_body_bytes = 0;
        m_deadline = clock_type::now() + m_limits.request_timeout;
        m_close_after = false;
        return true;
    }

    // After a response: the wait for the next request starts now.
    void request_done() { m_wait_started = clock_type::now(); }

    bool failed() const { return m_failed; }
    bool close_after() const { return m_close_after; }
    void set_close_after() { m_close_after = true; }

    bool client_gone() const
    {
        pollfd p{m_sock, POLLIN | POLLRDHUP, 0};
        if (poll(&p, 1, 0) <= 0)
            return false;
        if (p.revents & (POLLHUP | POLLERR | POLLRDHUP))
            return true;
        char c;
        return recv(m_sock, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
    }

    // Closes the connection; after an answer that left bytes unread, once the client has
    // had time to read it (up to 2 s and a body's bytes, cut short while the server is busy).
    void close()
    {
        if (m_close_after || m_failed) {
            shutdown(m_sock, SHUT_WR);
            drain(m_sock, milliseconds(2000), m_body_cap, [this] { return m_pool && m_pool->under_load(); });
        }
        close_socket(m_sock);
    }

    // (httplib's interface is const; waiting may answer 408 and mark the stream failed.)
    bool is_readable() const override { return m_off < m_len || const_cast<GuardedStream *>(this)->wait_readable(); }

    bool is_writable() const override
    {
        if (m_failed)
            return false;
        pollfd p{m_sock, POLLOUT, 0};
        return poll(&p, 1, int(m_limits.write_timeout.count())) > 0 && !(p.revents & (POLLERR | POLLHUP));
    }

    ssize_t read(char *ptr, size_t size) override
    {
        if (m_failed)
            return -1;
        if (m_off == m_len) {
            if (!wait_readable())
                return -1;
            ssize_t n;
            do {
                n = recv(m_sock, m_buf.data(), m_buf.size(), 0);
            } while (n < 0 && errno == EINTR);
            if (n <= 0)
                return n < 0 ? -1 : 0;
            m_off = 0;
            m_len = size_t(n);
        }
        const size_t n = std::min(size, m_len - m_off);
        if (!account(std::string_view(m_buf.data() + m_off, n)))
            return -1;
        std::memcpy(ptr, m_buf.data() + m_off, n);
        m_off += n;
        return ssize_t(n);
    }

    ssize_t write(const char *ptr, size_t size) override
    {
        if (!is_writable())
            return -1;
        ssize_t n;
        do {
            n = send(m_sock, ptr, size, MSG_NOSIGNAL);
        } while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string &ip, int &port) const override
    {
        numeric_name(getpeername, m_sock, ip, port);
    }
    void get_local_ip_and_port(std::string &ip, int &port) const override
    {
        numeric_name(getsockname, m_sock, ip, port);
    }
    socket_t socket() const override { return m_sock; }

private:
    bool stopping() const { return m_listening.load() == INVALID_SOCKET; }

    bool busy_and_late(clock_type::time_point now) const
    {
        return m_pool && m_pool->under_load() && now - m_wait_started >= m_limits.busy_grace;
    }

    // Waits until the socket has bytes for the current request, within its deadline.
    bool wait_readable()
    {
        for (;;) {
            if (m_failed || stopping())
                return false;
            const auto now = clock_type::now();
            if (now >= m_deadline)
                return answer(408, "Request Timeout",
                              "the request did not arrive within " +
                                  std::to_string(m_limits.request_timeout.count()) + " ms",
                              "request_timeout");
            if (busy_and_late(now))
                return answer(408, "Request Timeout",
                              "the server is busy and the request did not arrive within " +
                                  std::to_string(m_limits.busy_grace.count()) + " ms",
                              "request_timeout");
            const auto left = std::chrono::duration_cast<milliseconds>(m_deadline - now).count();
            pollfd p{m_sock, POLLIN, 0};
            const int r = poll(&p, 1, int(std::clamp<long long>(left, 1, 50)));
            if (r > 0)
                return true;
            if (r < 0 && errno != EINTR)
                return false;
        }
    }

    // Counts bytes handed to httplib: the head against its limits, then the body's.
    bool account(std::string_view bytes)
    {
        size_t body = bytes.size();
        if (m_head.state() == api::HeadMeter::State::Reading) {
            body -= m_head.feed(bytes);
            if (m_head.state() == api::HeadMeter::State::TooLarge)
                return answer(431, "Request Header Fields Too Large", m_head.problem(),
                              "request_header_fields_too_large");
        }
        m_body_bytes += body;
        if (m_body_bytes > m_body_cap)
            return answer(413, "Payload Too Large",
                          "the request body is larger than the limit of " + std::to_string(m_limits.max_body) +
                              " bytes",
                          "request_too_large");
        return true;
    }

    // The guard's own answer; the connection then closes. Returns false (for the caller's
    // failed read).
    bool answer(int status, const char *reason, const std::string &message, const std::string &code)
    {
        m_failed = true;
        std::string ip;
        int port = 0;
        get_remote_ip_and_port(ip, port);
        std::fprintf(stderr, "[serve] %d from %s:%d: %s\n", status, ip.c_str(), port, message.c_str());
        send_all(m_sock, error_response(status, reason, message, code), milliseconds(1000));
        return false;
    }

    const socket_t m_sock;
    const ConnectionLimits &m_limits;
    const std::atomic<socket_t> &m_listening;
    const ConnectionPool *m_pool;
    const size_t m_body_cap;

    std::array<char, 16384> m_buf{};
    size_t m_off = 0, m_len = 0;

    clock_type::time_point m_wait_started;
    clock_type::time_point m_deadline;
    api::HeadMeter m_head;
    size_t m_body_bytes = 0;
    bool m_failed = false;
    bool m_close_after = false;
};

namespace {

thread_local GuardedStream *t_stream = nullptr;

} // namespace

GuardedServer::GuardedServer(const ConnectionLimits &limits) : m_limits(limits)
{
    new_task_queue = [this] {
        auto *pool = new ConnectionPool(m_limits.workers, m_limits.waiting);
        m_pool = pool;
        return pool;
    };
    // What httplib's responses announce in "Keep-Alive: timeout=5, max=100".
    set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(m_limits.idle_timeout).count());
    set_keep_alive_max_count(m_limits.requests_per_connection);
    // httplib sets these on each accepted socket; the stream's own waits come first.
    set_read_timeout(std::chrono::duration_cast<std::chrono::seconds>(m_limits.request_timeout).count() + 1);
    set_write_timeout(std::chrono::duration_cast<std::chrono::seconds>(m_limits.write_timeout).count());
}

bool GuardedServer::process_and_close_socket(socket_t sock)
{
    if (t_refuse) {
        send_all(sock,
                 error_response(503, "Service Unavailable",
                                "the server has too many connections open; retry later", "server_busy"),
                 milliseconds(100));
        std::fprintf(stderr, "[serve] 503: too many connections, one refused\n");
        // What the client already sent, read so that the close does not reset the answer.
        std::array<char, 16384> buf;
        for (int i = 0; i < 4 && recv(sock, buf.data(), buf.size(), MSG_DONTWAIT) > 0; ++i) {
        }
        close_socket(sock);
        return false;
    }
    GuardedStream stream(sock, m_limits, svr_sock_, m_pool.load());
    t_stream = &stream;
    bool ok = false;
    for (size_t left = m_limits.requests_per_connection; left > 0 && stream.next_request(); --left) {
        bool closed = false;
        ok = process_request(stream, left == 1, closed, nullptr);
        stream.request_done();
        if (!ok || closed || stream.close_after() || stream.failed())
            break;
    }
    t_stream = nullptr;
    stream.close();
    return ok;
}

bool GuardedServer::client_gone() { return t_stream && t_stream->client_gone(); }

void GuardedServer::close_after(httplib::Response &res)
{
    res.set_header("Connection", "close");
    if (t_stream)
        t_stream->set_close_after();
}

bool GuardedServer::guard_answered() { return t_stream && t_stream->failed(); }

} // namespace longscope::cli
