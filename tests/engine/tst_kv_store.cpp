// The KV stores, one per mode, against what each promises: rows written through ensure() /
// keys() / values() read back intact (also across concat's reallocations), the memory ledger
// (reserved, resident, peak, copied) matches what the mode does and, for vmm and static, what
// the kernel reports as resident, vmm pointers never move, rows survive a mode change, and
// every failure is a typed, actionable exception that leaves the store usable.
#include "kv/kv_store.h"
#include "kv/kv_vmm.h"

#include "longscope/errors.h"

#include <QtTest>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define KV_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KV_TEST_ASAN 1
#endif
#endif

#ifdef KV_TEST_ASAN
// The stores refuse impossible sizes before calling malloc; should one ever slip through, a
// null (and so the OutOfMemory under test) is wanted, not ASan's abort on a huge request.
extern "C" const char *__asan_default_options()
{
    return "allocator_may_return_null=1";
}
#endif

using namespace longscope;

namespace {

constexpr int k_limit = 1000;
constexpr int k_layers = 3;
constexpr int k_embd = 32;

// A distinct, exactly representable value for every (layer, K or V, position, element), so a
// row landing in the wrong layer, half or position cannot go unnoticed. `tag` tells fills
// apart (a refill after clear(), a second store).
// Exact in a float for every shape used here (below 2^24).
float expected(int tag, int layer, int kv, int pos, int j, int n_embd)
{
    return float(tag * 4000000 + layer * 1000000 + kv * 500000 + pos * n_embd + j);
}

void write_row(KvStore &s, int tag, int layer, int pos)
{
    const int e = s.n_embd_kv();
    float *k = s.keys(layer) + size_t(pos) * size_t(e);
    float *v = s.values(layer) + size_t(pos) * size_t(e);
    for (int j = 0; j < e; ++j) {
        k[j] = expected(tag, layer, 0, pos, j, e);
        v[j] = expected(tag, layer, 1, pos, j, e);
    }
}

void write_rows(KvStore &s, int tag, int from, int to)
{
    for (int l = 0; l < s.n_layer(); ++l)
        for (int p = from; p < to; ++p)
            write_row(s, tag, l, p);
}

// The rows [0, n) of every layer as they should read, built once per shape so checking after
// every step is one memcmp per buffer (fast even under ASan).
struct Reference {
    Reference(int tag, int n_layer, int limit, int n_embd)
        : n_embd(n_embd), rows(size_t(n_layer) * 2)
    {
        for (int l = 0; l < n_layer; ++l)
            for (int kv = 0; kv < 2; ++kv) {
                std::vector<float> &r = rows[size_t(l) * 2 + size_t(kv)];
                r.resize(size_t(limit) * size_t(n_embd));
                for (int p = 0; p < limit; ++p)
                    for (int j = 0; j < n_embd; ++j)
                        r[size_t(p) * size_t(n_embd) + size_t(j)] = expected(tag, l, kv, p, j, n_embd);
            }
    }

    // Empty when rows [0, n) of every layer match; otherwise where the first difference is.
    QString check(KvStore &s, int n) const
    {
        const size_t count = size_t(n) * size_t(n_embd);
        for (int l = 0; l < s.n_layer(); ++l)
            for (int kv = 0; kv < 2; ++kv) {
                const float *got = kv == 0 ? s.keys(l) : s.values(l);
                const std::vector<float> &want = rows[size_t(l) * 2 + size_t(kv)];
                if (count == 0 || std::memcmp(got, want.data(), count * sizeof(float)) == 0)
                    continue;
                for (size_t i = 0; i < count; ++i)
                    if (got[i] != want[i])
                        return QStringLiteral("layer %1 %2 position %3 element %4: got %5, want %6 (after %7 tokens)")
                            .arg(l).arg(kv == 0 ? "K" : "V").arg(i / size_t(n_embd)).arg(i % size_t(n_embd))
                            .arg(double(got[i])).arg(double(want[i])).arg(n);
            }
        return {};
    }

    int n_embd;
    std::vector<std::vector<float>> rows;
};

// What a call threw: the engine's exception type by name, or "none".
struct Outcome {
    QString kind;
    QString message;
};

Outcome outcome_of(const std::function<void()> &f)
{
    try {
        f();
    } catch (const InvalidArgument &e) {
        return {"InvalidArgument", e.what()};
    } catch (const ContextOverflow &e) {
        return {"ContextOverflow", e.what()};
    } catch (const OutOfMemory &e) {
        return {"OutOfMemory", e.what()};
    } catch (const std::exception &e) {
        return {"other: " + QString::fromUtf8(typeid(e).name()), e.what()};
    }
    return {"none", {}};
}

uint64_t page_bytes()
{
    return uint64_t(sysconf(_SC_PAGESIZE));
}

// Field `index` of /proc/self/statm (0: address-space size, 1: resident), in bytes.
uint64_t statm_bytes(int index)
{
    unsigned long long f[2] = {0, 0};
    FILE *file = std::fopen("/proc/self/statm", "r");
    if (!file)
        return 0;
    const int got = std::fscanf(file, "%llu %llu", &f[0], &f[1]);
    std::fclose(file);
    return got == 2 ? uint64_t(f[index]) * page_bytes() : 0;
}

uint64_t rss_bytes()
{
    return statm_bytes(1);
}

uint64_t meminfo_kb(const char *key)
{
    FILE *file = std::fopen("/proc/meminfo", "r");
    if (!file)
        return 0;
    char line[256];
    uint64_t value = 0;
    const size_t len = std::strlen(key);
    while (std::fgets(line, sizeof line, file))
        if (std::strncmp(line, key, len) == 0) {
            value = std::strtoull(line + len, nullptr, 10);
            break;
        }
    std::fclose(file);
    return value;
}

// Caps the address space at what the process maps now plus `headroom` bytes, so an over-large
// allocation fails inside malloc / mmap instead of exhausting the machine; restores the
// previous limit when it goes out of scope.
class AddressSpaceCap {
public:
    explicit AddressSpaceCap(uint64_t headroom)
    {
        m_ok = getrlimit(RLIMIT_AS, &m_saved) == 0;
        if (!m_ok)
            return;
        rlimit capped = m_saved;
        capped.rlim_cur = rlim_t(statm_bytes(0) + headroom);
        if (m_saved.rlim_max != RLIM_INFINITY)
            capped.rlim_cur = std::min(capped.rlim_cur, m_saved.rlim_max);
        m_ok = setrlimit(RLIMIT_AS, &capped) == 0;
    }
    ~AddressSpaceCap()
    {
        if (m_ok)
            setrlimit(RLIMIT_AS, &m_saved);
    }
    AddressSpaceCap(const AddressSpaceCap &) = delete;
    AddressSpaceCap &operator=(const AddressSpaceCap &) = delete;
    bool ok() const { return m_ok; }

private:
    rlimit m_saved{};
    bool m_ok = false;
};

void add_mode_rows()
{
    QTest::addColumn<int>("mode");
    QTest::newRow("concat") << int(KvMode::Concat);
    QTest::newRow("static") << int(KvMode::Static);
    QTest::newRow("vmm") << int(KvMode::Vmm);
}

uint64_t round_up(uint64_t n, uint64_t to)
{
    return (n + to - 1) / to * to;
}

} // namespace

class TestKvStore : public QObject {
    Q_OBJECT

private slots:
    // 1. A decode loop (ensure(pos + 1), write row pos of every layer) and a chunked prompt
    // (ensure(pos + 17)) read back every row after every step; concat moves its buffers at
    // each step, so pointers are fetched anew each time, as the forward pass must.
    void rows_read_back_data()
    {
        QTest::addColumn<int>("mode");
        QTest::addColumn<int>("chunk");
        for (auto [name, mode] : {std::pair{"concat", KvMode::Concat}, std::pair{"static", KvMode::Static},
                                  std::pair{"vmm", KvMode::Vmm}}) {
            QTest::newRow(QByteArray(name) + " token by token") << int(mode) << 1;
            QTest::newRow(QByteArray(name) + " chunks of 17") << int(mode) << 17;
        }
    }
    void rows_read_back()
    {
        QFETCH(int, mode);
        QFETCH(int, chunk);
        const Reference ref(1, k_layers, k_limit, k_embd);
        auto store = make_kv_store(KvMode(mode), k_layers, k_limit, k_embd);
        QCOMPARE(int(store->mode()), mode);
        QCOMPARE(store->n_layer(), k_layers);
        QCOMPARE(store->limit(), k_limit);
        QCOMPARE(store->n_embd_kv(), k_embd);
        for (int pos = 0; pos < k_limit;) {
            const int n = std::min(pos + chunk, k_limit);
            store->ensure(n);
            QVERIFY(store->capacity() >= n);
            QVERIFY(store->capacity() <= k_limit);
            if (KvMode(mode) == KvMode::Concat)
                QCOMPARE(store->capacity(), n); // exactly the request, no slack
            if (KvMode(mode) == KvMode::Static)
                QCOMPARE(store->capacity(), k_limit);
            write_rows(*store, 1, pos, n);
            const QString err = ref.check(*store, n);
            QVERIFY2(err.isEmpty(), qPrintable(err));
            pos = n;
        }
        // A repeated or smaller ensure() changes nothing.
        store->ensure(k_limit);
        store->ensure(1);
        store->ensure(0);
        const QString err = ref.check(*store, k_limit);
        QVERIFY2(err.isEmpty(), qPrintable(err));
    }

    // 2. The ledger. Static pays the full limit from the start and never moves.
    void static_accounting()
    {
        auto store = make_kv_store(KvMode::Static, k_layers, k_limit, k_embd);
        const uint64_t full = uint64_t(k_limit) * k_embd * sizeof(float) * 2 * k_layers;
        QCOMPARE(store->reserved_bytes(), full);
        QCOMPARE(store->resident_bytes(), full);
        QCOMPARE(store->peak_resident_bytes(), full);
        QCOMPARE(store->capacity(), k_limit);
        for (int pos = 0; pos < 200; ++pos) {
            store->ensure(pos + 1);
            write_rows(*store, 1, pos, pos + 1);
        }
        QCOMPARE(store->reserved_bytes(), full);
        QCOMPARE(store->resident_bytes(), full);
        QCOMPARE(store->peak_resident_bytes(), full);
        QCOMPARE(store->copied_bytes(), uint64_t(0));
    }

    // Vmm reserves the limit but commits page-granular steps as tokens arrive.
    void vmm_accounting()
    {
        const int limit = 100000, layers = 3, embd = 256; // 1 KiB rows, ~586 MiB reserved
        auto store = make_kv_store(KvMode::Vmm, layers, limit, embd);
        const uint64_t row = uint64_t(embd) * sizeof(float);
        const uint64_t full = uint64_t(limit) * row * 2 * layers;
        const uint64_t granule = VmmKvStore::commit_granule();
        QCOMPARE(granule % page_bytes(), uint64_t(0));
        QVERIFY(store->reserved_bytes() >= full);
        QVERIFY(store->reserved_bytes() <= full + 2 * layers * granule); // per-region rounding only
        QCOMPARE(store->resident_bytes(), uint64_t(0));
        QCOMPARE(store->capacity(), 0);

        uint64_t last = 0;
        int steps = 0;
        for (int n = 1; n <= 300; ++n) {
            store->ensure(n);
            write_rows(*store, 1, n - 1, n);
            const uint64_t resident = store->resident_bytes();
            QCOMPARE(resident, 2 * layers * round_up(n * row, granule));
            QCOMPARE(resident % page_bytes(), uint64_t(0));
            QVERIFY(resident >= uint64_t(n) * row * 2 * layers);
            QVERIFY(resident <= store->reserved_bytes());
            QVERIFY(resident >= last);
            QCOMPARE(store->peak_resident_bytes(), resident);
            QCOMPARE(uint64_t(store->capacity()), resident / (2 * layers) / row);
            if (resident != last)
                ++steps;
            last = resident;
            if (n == 10)
                QVERIFY2(resident * 100 < store->reserved_bytes(), "10 tokens should commit a sliver of the reservation");
        }
        QCOMPARE(steps, int(round_up(300 * row, granule) / granule)); // one step per granule
        QCOMPARE(store->copied_bytes(), uint64_t(0));
        const QString err = Reference(1, layers, 300, embd).check(*store, 300);
        QVERIFY2(err.isEmpty(), qPrintable(err));
    }

    // Concat allocates exactly n rows and copies the old ones at every step: copied bytes
    // grow quadratically and the peak holds old and new at once.
    void concat_accounting()
    {
        const int n_tokens = 500;
        auto store = make_kv_store(KvMode::Concat, k_layers, k_limit, k_embd);
        const uint64_t row_all_layers = uint64_t(k_embd) * sizeof(float) * 2 * k_layers;
        QCOMPARE(store->resident_bytes(), uint64_t(0));
        QCOMPARE(store->reserved_bytes(), uint64_t(0));
        uint64_t want_copied = 0;
        for (int pos = 0; pos < n_tokens; ++pos) {
            const uint64_t old_size = uint64_t(store->capacity()) * row_all_layers;
            QCOMPARE(old_size, uint64_t(pos) * row_all_layers);
            want_copied += old_size; // each step copies everything held before it
            store->ensure(pos + 1);
            write_rows(*store, 1, pos, pos + 1);
            QCOMPARE(store->copied_bytes(), want_copied);
            QCOMPARE(store->reserved_bytes(), uint64_t(pos + 1) * row_all_layers);
            QCOMPARE(store->resident_bytes(), store->reserved_bytes());
            QCOMPARE(store->peak_resident_bytes(), uint64_t(2 * pos + 1) * row_all_layers);
        }
        // Independently of the loop: 0 + 1 + ... + (N - 1) rows.
        QCOMPARE(store->copied_bytes(), uint64_t(n_tokens) * (n_tokens - 1) / 2 * row_all_layers);
        const QString err = Reference(1, k_layers, n_tokens, k_embd).check(*store, n_tokens);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        // Growing by a chunk copies once, not per token.
        const uint64_t before = store->copied_bytes();
        store->ensure(n_tokens + 100);
        QCOMPARE(store->copied_bytes() - before, uint64_t(n_tokens) * row_all_layers);
    }

    // 3. Vmm appends in place: the pointers handed out never change, across growth and clear.
    void vmm_pointers_stay()
    {
        const int limit = 5000, layers = 2, embd = 64;
        auto store = make_kv_store(KvMode::Vmm, layers, limit, embd);
        std::vector<float *> k, v;
        for (int l = 0; l < layers; ++l) {
            k.push_back(store->keys(l));
            v.push_back(store->values(l));
        }
        auto same_pointers = [&] {
            for (int l = 0; l < layers; ++l)
                if (store->keys(l) != k[size_t(l)] || store->values(l) != v[size_t(l)])
                    return false;
            return true;
        };
        for (int n : {1, 2, 3, 17, 255, 256, 257, 1000, 4096, 4999, 5000}) {
            store->ensure(n);
            QVERIFY2(same_pointers(), qPrintable(QStringLiteral("moved at ensure(%1)").arg(n)));
        }
        write_rows(*store, 1, 0, limit);
        const QString err = Reference(1, layers, limit, embd).check(*store, limit);
        QVERIFY2(err.isEmpty(), qPrintable(err));

        store->clear();
        QVERIFY(store->resident_bytes() < page_bytes() * 2 * layers); // ~0
        QCOMPARE(store->capacity(), 0);
        QVERIFY(same_pointers());
        // The old pages were given back: a fresh commit reads zeros, not the last conversation.
        store->ensure(1);
        for (int l = 0; l < layers; ++l)
            for (int j = 0; j < embd; ++j) {
                QCOMPARE(store->keys(l)[j], 0.0f);
                QCOMPARE(store->values(l)[j], 0.0f);
            }
        QVERIFY(same_pointers());
    }

    // clear() then a second conversation, in every mode.
    void clear_and_refill_data() { add_mode_rows(); }
    void clear_and_refill()
    {
        QFETCH(int, mode);
        auto store = make_kv_store(KvMode(mode), k_layers, k_limit, k_embd);
        store->ensure(300);
        write_rows(*store, 1, 0, 300);
        const uint64_t peak = store->peak_resident_bytes();
        store->clear();
        switch (KvMode(mode)) {
        case KvMode::Static: // keeps its buffers for the next conversation
            QCOMPARE(store->resident_bytes(), store->reserved_bytes());
            QCOMPARE(store->capacity(), k_limit);
            break;
        default:
            QCOMPARE(store->resident_bytes(), uint64_t(0));
            QCOMPARE(store->capacity(), 0);
        }
        QCOMPARE(store->peak_resident_bytes(), peak); // a peak is history, clear() keeps it
        const Reference ref(2, k_layers, k_limit, k_embd);
        for (int pos = 0; pos < 120; ++pos) {
            store->ensure(pos + 1);
            write_rows(*store, 2, pos, pos + 1);
        }
        const QString err = ref.check(*store, 120);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        store->clear();
        store->clear(); // twice is harmless
    }

    // 4. Switching modes mid-conversation moves the rows intact, in every direction.
    void copy_between_modes_data()
    {
        QTest::addColumn<int>("from");
        QTest::addColumn<int>("to");
        const std::pair<const char *, KvMode> modes[] = {
            {"concat", KvMode::Concat}, {"static", KvMode::Static}, {"vmm", KvMode::Vmm}};
        for (const auto &[from_name, from] : modes)
            for (const auto &[to_name, to] : modes)
                QTest::newRow(qPrintable(QStringLiteral("%1 -> %2").arg(from_name, to_name)))
                    << int(from) << int(to);
    }
    void copy_between_modes()
    {
        QFETCH(int, from);
        QFETCH(int, to);
        const int n = 300;
        auto src = make_kv_store(KvMode(from), k_layers, k_limit, k_embd);
        for (int pos = 0; pos < n; ++pos) {
            src->ensure(pos + 1);
            write_rows(*src, 1, pos, pos + 1);
        }
        auto dst = make_kv_store(KvMode(to), k_layers, k_limit, k_embd);
        dst->ensure(20);
        write_rows(*dst, 2, 0, 20); // stale rows the copy must overwrite
        copy_kv_rows(*src, *dst, n);
        QVERIFY(dst->capacity() >= n);
        const Reference ref(1, k_layers, k_limit, k_embd);
        QString err = ref.check(*dst, n);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        err = ref.check(*src, n); // the source is untouched
        QVERIFY2(err.isEmpty(), qPrintable(err));
        // The conversation continues in the new store.
        dst->ensure(n + 1);
        write_rows(*dst, 1, n, n + 1);
        err = ref.check(*dst, n + 1);
        QVERIFY2(err.isEmpty(), qPrintable(err));

        copy_kv_rows(*src, *dst, 0); // nothing to move is fine
        copy_kv_rows(*src, *src, n); // onto itself: a no-op
        err = ref.check(*src, n);
        QVERIFY2(err.isEmpty(), qPrintable(err));
    }

    void copy_rejects_mismatches()
    {
        auto src = make_kv_store(KvMode::Vmm, k_layers, k_limit, k_embd);
        src->ensure(10);
        auto other_layers = make_kv_store(KvMode::Vmm, k_layers + 1, k_limit, k_embd);
        auto other_width = make_kv_store(KvMode::Concat, k_layers, k_limit, k_embd * 2);
        QCOMPARE(outcome_of([&] { copy_kv_rows(*src, *other_layers, 10); }).kind, QString("InvalidArgument"));
        QCOMPARE(outcome_of([&] { copy_kv_rows(*src, *other_width, 10); }).kind, QString("InvalidArgument"));
        auto dst = make_kv_store(KvMode::Concat, k_layers, k_limit, k_embd);
        // More rows than the source holds, or a negative count.
        QCOMPARE(outcome_of([&] { copy_kv_rows(*src, *dst, src->capacity() + 1); }).kind, QString("InvalidArgument"));
        QCOMPARE(outcome_of([&] { copy_kv_rows(*src, *dst, -1); }).kind, QString("InvalidArgument"));
        QCOMPARE(dst->capacity(), 0); // untouched by the refused copies
        // A destination with a smaller limit overflows it.
        auto small = make_kv_store(KvMode::Static, k_layers, 5, k_embd);
        QCOMPARE(outcome_of([&] { copy_kv_rows(*src, *small, 10); }).kind, QString("ContextOverflow"));
    }

    // 5. Errors. Past the limit is a ContextOverflow (the caller asked for more context than
    // allowed, reported like an over-long prompt); the store stays usable.
    void ensure_beyond_limit_data() { add_mode_rows(); }
    void ensure_beyond_limit()
    {
        QFETCH(int, mode);
        auto store = make_kv_store(KvMode(mode), k_layers, k_limit, k_embd);
        store->ensure(10);
        write_rows(*store, 1, 0, 10);
        const int capacity = store->capacity();
        const Outcome over = outcome_of([&] { store->ensure(k_limit + 1); });
        QCOMPARE(over.kind, QString("ContextOverflow"));
        QVERIFY2(over.message.contains(QString::number(k_limit)), qPrintable(over.message));
        QCOMPARE(outcome_of([&] { store->ensure(INT_MAX); }).kind, QString("ContextOverflow"));
        QCOMPARE(outcome_of([&] { store->ensure(-1); }).kind, QString("InvalidArgument"));
        QCOMPARE(outcome_of([&] { store->keys(-1); }).kind, QString("InvalidArgument"));
        QCOMPARE(outcome_of([&] { store->values(k_layers); }).kind, QString("InvalidArgument"));
        QCOMPARE(store->capacity(), capacity);
        const Reference ref(1, k_layers, k_limit, k_embd);
        QString err = ref.check(*store, 10);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        store->ensure(k_limit); // exactly the limit is fine
        write_rows(*store, 1, 10, k_limit);
        err = ref.check(*store, k_limit);
        QVERIFY2(err.isEmpty(), qPrintable(err));
    }

    void none_mode_has_no_store()
    {
        const Outcome o = outcome_of([] { make_kv_store(KvMode::None, k_layers, k_limit, k_embd); });
        QCOMPARE(o.kind, QString("InvalidArgument"));
        QVERIFY2(o.message.contains("none"), qPrintable(o.message));
    }

    void bad_shapes_data()
    {
        QTest::addColumn<int>("mode");
        QTest::addColumn<int>("layers");
        QTest::addColumn<int>("limit");
        QTest::addColumn<int>("embd");
        for (auto [name, mode] : {std::pair{"concat", KvMode::Concat}, std::pair{"static", KvMode::Static},
                                  std::pair{"vmm", KvMode::Vmm}}) {
            QTest::newRow(QByteArray(name) + " no layers") << int(mode) << 0 << k_limit << k_embd;
            QTest::newRow(QByteArray(name) + " zero limit") << int(mode) << k_layers << 0 << k_embd;
            QTest::newRow(QByteArray(name) + " negative limit") << int(mode) << k_layers << -5 << k_embd;
            QTest::newRow(QByteArray(name) + " zero width") << int(mode) << k_layers << k_limit << 0;
            QTest::newRow(QByteArray(name) + " negative width") << int(mode) << k_layers << k_limit << INT_MIN;
        }
    }
    void bad_shapes()
    {
        QFETCH(int, mode);
        QFETCH(int, layers);
        QFETCH(int, limit);
        QFETCH(int, embd);
        const Outcome o = outcome_of([&] { make_kv_store(KvMode(mode), layers, limit, embd); });
        QCOMPARE(o.kind, QString("InvalidArgument"));
    }

    // Sizes no machine has: refused with a typed error, never a crash or a wrapped size. A
    // concat store allocates nothing up front, so its refusal comes at the growth, and it stays
    // usable afterwards.
    void absurd_sizes_data()
    {
        QTest::addColumn<int>("mode");
        QTest::addColumn<int>("layers");
        QTest::addColumn<int>("limit");
        QTest::addColumn<int>("embd");
        for (auto [name, mode] : {std::pair{"concat", KvMode::Concat}, std::pair{"static", KvMode::Static},
                                  std::pair{"vmm", KvMode::Vmm}}) {
            // 2^30 tokens of 2^20 floats: 8 PiB, more than any address space.
            QTest::newRow(QByteArray(name) + " 8 PiB") << int(mode) << 1 << (1 << 30) << (1 << 20);
            // Past 2^64 bytes: the size itself must not wrap around to something small.
            QTest::newRow(QByteArray(name) + " beyond 64 bits") << int(mode) << (1 << 20) << INT_MAX << (1 << 20);
            QTest::newRow(QByteArray(name) + " all INT_MAX") << int(mode) << INT_MAX << INT_MAX << INT_MAX;
        }
    }
    void absurd_sizes()
    {
        QFETCH(int, mode);
        QFETCH(int, layers);
        QFETCH(int, limit);
        QFETCH(int, embd);
        std::unique_ptr<KvStore> store;
        const Outcome made = outcome_of([&] { store = make_kv_store(KvMode(mode), layers, limit, embd); });
        if (!store) {
            QVERIFY2(made.kind == "OutOfMemory" || made.kind == "InvalidArgument",
                     qPrintable(made.kind + ": " + made.message));
            if (made.kind == "OutOfMemory")
                QVERIFY2(made.message.contains("context limit"), qPrintable(made.message));
            return;
        }
        QCOMPARE(int(store->mode()), int(KvMode::Concat)); // the only mode that allocates later
        store->ensure(2);
        write_rows(*store, 1, 0, 2);
        const Outcome grown = outcome_of([&] { store->ensure(limit); });
        QCOMPARE(grown.kind, QString("OutOfMemory"));
        QVERIFY2(grown.message.contains("MiB") && grown.message.contains("context limit") &&
                     grown.message.contains("vmm"),
                 qPrintable(grown.message));
        QCOMPARE(store->capacity(), 2);
        const QString err = Reference(1, layers, 2, embd).check(*store, 2);
        QVERIFY2(err.isEmpty(), qPrintable(err));
        store->ensure(3);
        QCOMPARE(store->capacity(), 3);
    }

    // Bigger than memory allows. The address-space rows make malloc / mmap fail for real under
    // RLIMIT_AS; the physical-memory rows are refused before anything is touched. ASan
    // reserves terabytes of shadow, so it cannot run under an address-space cap.
    void out_of_memory_data()
    {
        QTest::addColumn<int>("mode");
        QTest::addColumn<bool>("over_physical"); // else: over a 256 MiB address-space cap
        QTest::newRow("static over address-space cap") << int(KvMode::Static) << false;
        QTest::newRow("vmm reservation over address-space cap") << int(KvMode::Vmm) << false;
        QTest::newRow("concat growth over address-space cap") << int(KvMode::Concat) << false;
        QTest::newRow("static over physical memory") << int(KvMode::Static) << true;
        QTest::newRow("concat growth over physical memory") << int(KvMode::Concat) << true;
    }
    void out_of_memory()
    {
        QFETCH(int, mode);
        QFETCH(bool, over_physical);
#ifdef KV_TEST_ASAN
        const bool asan = true;
#else
        const bool asan = false;
#endif
        if (asan && !over_physical)
            QSKIP("ASan maps terabytes of shadow memory, so an RLIMIT_AS cap would break it, not the store");

        const int layers = over_physical ? 1 : 2;
        const int embd = over_physical ? (1 << 20) : 4096; // 4 MiB or 16 KiB rows
        int limit = 16384;                                 // 1 GiB in all for the cap rows
        if (over_physical) {
            // Each buffer alone 1.5x RAM + swap, so even without the store's own check the
            // kernel's overcommit heuristic would refuse it rather than let it be touched.
            const uint64_t memory = (meminfo_kb("MemTotal:") + meminfo_kb("SwapTotal:")) * 1024;
            if (memory == 0)
                QSKIP("/proc/meminfo is unreadable here");
            limit = int(std::min<uint64_t>(INT_MAX, memory * 3 / 2 / (uint64_t(embd) * sizeof(float)) + 1));
        }

        std::unique_ptr<KvStore> store;
        if (KvMode(mode) == KvMode::Concat) {
            store = make_kv_store(KvMode::Concat, layers, limit, embd);
            store->ensure(10);
            write_rows(*store, 1, 0, 10);
        }
        Outcome o;
        {
            // The physical-memory rows also run under the cap where possible: a safety net
            // should the store's check ever regress.
            std::unique_ptr<AddressSpaceCap> cap;
            if (!asan) {
                cap = std::make_unique<AddressSpaceCap>(uint64_t(256) << 20);
                if (!cap->ok())
                    QSKIP("setrlimit(RLIMIT_AS) is not permitted here");
            }
            if (store)
                o = outcome_of([&] { store->ensure(limit); });
            else
                o = outcome_of([&] { store = make_kv_store(KvMode(mode), layers, limit, embd); });
        }
        QCOMPARE(o.kind, QString("OutOfMemory"));
        QVERIFY2(o.message.contains("MiB") && o.message.contains(QString::number(limit) + " tokens") &&
                     o.message.contains("context limit"),
                 qPrintable(o.message));
        if (over_physical)
            QVERIFY2(o.message.contains("available"), qPrintable(o.message)); // refused up front
        if (KvMode(mode) != KvMode::Vmm)
            QVERIFY2(o.message.contains("vmm"), qPrintable(o.message)); // the mode that would fit
        if (KvMode(mode) == KvMode::Concat) {
            // Unchanged and still usable.
            QCOMPARE(store->capacity(), 10);
            const QString err = Reference(1, layers, 10, embd).check(*store, 10);
            QVERIFY2(err.isEmpty(), qPrintable(err));
            store->ensure(11);
            write_rows(*store, 1, 10, 11);
        } else {
            QVERIFY(!store);
        }
    }

    // 6. The ledger agrees with the kernel: what vmm (and static) call resident shows up in
    // the process's RSS, and what vmm gives back leaves it.
    void resident_matches_rss_data()
    {
        QTest::addColumn<int>("mode");
        QTest::newRow("vmm") << int(KvMode::Vmm);
        QTest::newRow("static") << int(KvMode::Static);
    }
    void resident_matches_rss()
    {
        QFETCH(int, mode);
        const int layers = 2, embd = 1024, n = 4096; // 4 KiB rows: 64 MiB for n tokens
        const int limit = KvMode(mode) == KvMode::Vmm ? 4 * n : n;
        const uint64_t want = uint64_t(n) * embd * sizeof(float) * 2 * layers;
        // Allocator metadata, ASan's shadow (1/8 of what is touched), page tables.
        const auto close = [](uint64_t got, uint64_t expect) {
            const uint64_t slack = (uint64_t(10) << 20) + expect / 5;
            return got + slack >= expect && got <= expect + slack;
        };
        const auto mib = [](uint64_t b) { return QString::number(double(b) / (1 << 20), 'f', 1) + " MiB"; };

        const uint64_t rss0 = rss_bytes();
        QVERIFY(rss0 > 0);
        auto store = make_kv_store(KvMode(mode), layers, limit, embd);
        const uint64_t rss1 = rss_bytes();
        if (KvMode(mode) == KvMode::Static) {
            QCOMPARE(store->resident_bytes(), want);
            QVERIFY2(close(rss1 - std::min(rss0, rss1), want),
                     qPrintable("static: RSS grew by " + mib(rss1 - std::min(rss0, rss1)) + " for " + mib(want)));
            return;
        }
        // Reserving 256 MiB of address space costs no memory.
        QVERIFY2(rss1 < rss0 + (uint64_t(2) << 20), qPrintable("reservation raised RSS by " + mib(rss1 - rss0)));
        QCOMPARE(store->resident_bytes(), uint64_t(0));
        store->ensure(n);
        QCOMPARE(store->resident_bytes(), want); // 16 MiB per region: a whole number of granules
        write_rows(*store, 1, 0, n);
        const uint64_t rss2 = rss_bytes();
        const uint64_t grew = rss2 - std::min(rss1, rss2);
        QVERIFY2(close(grew, want), qPrintable("vmm: RSS grew by " + mib(grew) + " for " + mib(want) + " resident"));
        store->clear();
        const uint64_t rss3 = rss_bytes();
        const uint64_t fell = rss2 - std::min(rss2, rss3);
        QVERIFY2(close(fell, want), qPrintable("vmm: clear() gave back " + mib(fell) + " of " + mib(want)));
        QCOMPARE(store->resident_bytes(), uint64_t(0));
    }
};

QTEST_APPLESS_MAIN(TestKvStore)
#include "tst_kv_store.moc"
