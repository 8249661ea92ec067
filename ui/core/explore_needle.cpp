#include "core/explore_needle.h"

#include "core/explore_format.h"
#include "core/settings_json.h"

#include "longscope/errors.h"
#include "longscope/model.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonParseError>

#include <chrono>
#include <cmath>
#include <new>

namespace longscope::ui {

namespace {

constexpr int k_version = 1;
constexpr double k_max_length = double(1 << 24);
constexpr double k_max_count = 9e15;

void setError(QString *error, const QString &message)
{
    if (error)
        *error = message;
}

QString qs(std::string_view s) { return QString::fromUtf8(s.data(), qsizetype(s.size())); }

// The cell's numbers as JSON: probabilities are finite and in [0, 1], log-probs at most 0.
QJsonObject cellToJson(const NeedleGridCell &c)
{
    return QJsonObject{{QStringLiteral("length"), c.length},
                       {QStringLiteral("depth"), c.depth},
                       {QStringLiteral("actual_depth"), c.actual_depth},
                       {QStringLiteral("trials"), c.trials},
                       {QStringLiteral("answer_tokens"), c.answer_tokens},
                       {QStringLiteral("log_prob"), c.log_prob},
                       {QStringLiteral("probability"), c.probability},
                       {QStringLiteral("mean_token_log_prob"), c.mean_token_log_prob},
                       {QStringLiteral("retrieved"), c.retrieved}};
}

bool numberIn(const QJsonValue &v, double lo, double hi, double &out)
{
    return jsonFiniteNumber(v, lo, out) && out <= hi;
}

std::optional<NeedleGridCell> cellFromJson(const QJsonObject &o)
{
    NeedleGridCell c;
    qint64 length = 0, trials = 0, retrieved = 0;
    // A log-prob may be very negative but never positive (nor -inf: JSON has no infinity).
    constexpr double k_lowest = -1e300;
    if (!jsonWholeNumber(o.value(QStringLiteral("length")), 1, k_max_length, length) ||
        !numberIn(o.value(QStringLiteral("depth")), 0, 1, c.depth) ||
        !numberIn(o.value(QStringLiteral("actual_depth")), 0, 1, c.actual_depth) ||
        !jsonWholeNumber(o.value(QStringLiteral("trials")), 0, 1e6, trials) ||
        !numberIn(o.value(QStringLiteral("answer_tokens")), 0, k_max_length, c.answer_tokens) ||
        !numberIn(o.value(QStringLiteral("log_prob")), k_lowest, 0, c.log_prob) ||
        !numberIn(o.value(QStringLiteral("probability")), 0, 1, c.probability) ||
        !numberIn(o.value(QStringLiteral("mean_token_log_prob")), k_lowest, 0, c.mean_token_log_prob) ||
        !jsonWholeNumber(o.value(QStringLiteral("retrieved")), 0, double(trials), retrieved))
        return std::nullopt;
    c.length = int(length);
    c.trials = int(trials);
    c.retrieved = int(retrieved);
    return c;
}

} // namespace

const NeedleGridCell *NeedleRunResult::cell(int row, int column) const
{
    if (row < 0 || column < 0 || row >= lengths.size() || column >= depths.size())
        return nullptr;
    const qsizetype i = qsizetype(row) * depths.size() + column;
    return i < cells.size() ? &cells[i] : nullptr;
}

double NeedleRunResult::meanProbability() const
{
    double sum = 0;
    int n = 0;
    for (const NeedleGridCell &c : cells)
        if (c.trials > 0) {
            sum += c.probability;
            ++n;
        }
    return n ? sum / n : 0;
}

int NeedleRunResult::retrievedCells() const
{
    int n = 0;
    for (const NeedleGridCell &c : cells)
        n += c.allRetrieved() ? 1 : 0;
    return n;
}

QJsonObject NeedleRunResult::toJson() const
{
    QJsonArray lengthArray, depthArray, cellArray;
    for (int l : lengths)
        lengthArray.append(l);
    for (double d : depths)
        depthArray.append(d);
    for (const NeedleGridCell &c : cells)
        cellArray.append(cellToJson(c));
    return QJsonObject{{QStringLiteral("format"), format()},
                       {QStringLiteral("version"), k_version},
                       {QStringLiteral("id"), id},
                       {QStringLiteral("label"), label},
                       {QStringLiteral("settings"), settingsToJson(settings)},
                       {QStringLiteral("task"), qs(to_string(task))},
                       {QStringLiteral("lengths"), lengthArray},
                       {QStringLiteral("depths"), depthArray},
                       {QStringLiteral("trials"), trials},
                       // A string: a 64-bit seed does not fit a JSON number exactly.
                       {QStringLiteral("seed"), QString::number(seed)},
                       {QStringLiteral("n_ctx_train"), n_ctx_train},
                       {QStringLiteral("model"), model_name},
                       {QStringLiteral("book"), book_title},
                       {QStringLiteral("created"), created.toUTC().toString(Qt::ISODateWithMs)},
                       {QStringLiteral("cancelled"), cancelled},
                       {QStringLiteral("seconds"), seconds},
                       {QStringLiteral("peak_memory_bytes"), double(peak_memory_bytes)},
                       {QStringLiteral("steps"), steps},
                       {QStringLiteral("cells"), cellArray}};
}

QByteArray NeedleRunResult::toJsonBytes() const { return QJsonDocument(toJson()).toJson(QJsonDocument::Indented); }

std::optional<NeedleRunResult> NeedleRunResult::fromJson(const QJsonObject &j, QString *error)
{
    NeedleRunResult r;
    if (!readRunHeader(j, format(), k_version, QStringLiteral("not a Longscope needle grid"),
                       QStringLiteral("unsupported needle grid version"), r, error))
        return std::nullopt;
    const std::optional<longscope::NeedleTask> task = parse_needle_task(j.value(QStringLiteral("task")).toString().toStdString());
    if (!task) {
        setError(error, QStringLiteral("unknown needle task \"%1\"").arg(j.value(QStringLiteral("task")).toString()));
        return std::nullopt;
    }
    r.task = *task;
    bool seedOk = false;
    r.seed = j.value(QStringLiteral("seed")).toString().toULongLong(&seedOk);
    qint64 trials = 0, train = 0, steps = 0;
    if (!seedOk || !jsonWholeNumber(j.value(QStringLiteral("trials")), 1, 1e6, trials) ||
        !jsonWholeNumber(j.value(QStringLiteral("n_ctx_train")), 0, k_max_length, train) ||
        !jsonWholeNumber(j.value(QStringLiteral("steps")), 0, k_max_count, steps) ||
        !jsonWholeNumber(j.value(QStringLiteral("peak_memory_bytes")), 0, k_max_count, r.peak_memory_bytes) ||
        !jsonFiniteNumber(j.value(QStringLiteral("seconds")), 0, r.seconds)) {
        setError(error, QStringLiteral("a number is missing or out of range"));
        return std::nullopt;
    }
    r.trials = int(trials);
    r.n_ctx_train = int(train);
    r.steps = int(steps);
    for (const QJsonValue &v : j.value(QStringLiteral("lengths")).toArray()) {
        qint64 l = 0;
        if (!jsonWholeNumber(v, 1, k_max_length, l)) {
            setError(error, QStringLiteral("a length is not a whole number of tokens"));
            return std::nullopt;
        }
        r.lengths.append(int(l));
    }
    for (const QJsonValue &v : j.value(QStringLiteral("depths")).toArray()) {
        double d = 0;
        if (!numberIn(v, 0, 1, d)) {
            setError(error, QStringLiteral("a depth is outside 0..1"));
            return std::nullopt;
        }
        r.depths.append(d);
    }
    const QJsonArray cells = j.value(QStringLiteral("cells")).toArray();
    if (r.lengths.isEmpty() || r.depths.isEmpty() || cells.size() != r.lengths.size() * r.depths.size()) {
        setError(error, QStringLiteral("the grid has %1 cells for %2 lengths x %3 depths")
                            .arg(cells.size())
                            .arg(r.lengths.size())
                            .arg(r.depths.size()));
        return std::nullopt;
    }
    for (qsizetype i = 0; i < cells.size(); ++i) {
        std::optional<NeedleGridCell> c = cellFromJson(cells[i].toObject());
        if (!c || c->length != r.lengths[i / r.depths.size()] || c->depth != r.depths[i % r.depths.size()]) {
            setError(error, QStringLiteral("needle grid cell %1 is malformed").arg(i));
            return std::nullopt;
        }
        r.cells.append(*c);
    }
    return r;
}

std::optional<NeedleRunResult> NeedleRunResult::fromJsonBytes(const QByteArray &bytes, QString *error)
{
    QJsonParseError parse{};
    const QJsonDocument doc = QJsonDocument::fromJson(bytes, &parse);
    if (parse.error != QJsonParseError::NoError || !doc.isObject()) {
        setError(error, parse.error != QJsonParseError::NoError
                            ? QStringLiteral("not valid JSON: %1").arg(parse.errorString())
                            : QStringLiteral("not a JSON object"));
        return std::nullopt;
    }
    return fromJson(doc.object(), error);
}

QByteArray needleCsv(const QVector<NeedleRunResult> &runs)
{
    QByteArray out = "label,settings,task,length,depth,actual_depth,trials,answer_tokens,log_prob,probability,"
                     "mean_token_log_prob,retrieved,beyond_trained\n";
    const auto num = [](double v) { return QByteArray::number(v, 'g', 10); };
    for (const NeedleRunResult &run : runs) {
        const QByteArray head = exploreCsvField(run.label) + ',' + exploreCsvField(describeSettings(run.settings)) + ',' +
                                exploreCsvField(qs(to_string(run.task)));
        for (const NeedleGridCell &c : run.cells)
            out += head + ',' + QByteArray::number(c.length) + ',' + num(c.depth) + ',' + num(c.actual_depth) + ',' +
                   QByteArray::number(c.trials) + ',' + num(c.answer_tokens) + ',' + num(c.log_prob) + ',' +
                   num(c.probability) + ',' + num(c.mean_token_log_prob) + ',' + QByteArray::number(c.retrieved) +
                   ',' + (run.n_ctx_train > 0 && c.length > run.n_ctx_train ? '1' : '0') + '\n';
    }
    return out;
}

NeedleRunResult runNeedleGrid(const longscope::Model &model, const NeedleRequest &request,
                              std::span<const int32_t> book, int nThreads,
                              const std::function<bool(qint64, qint64)> &progress)
{
    NeedleRunResult run;
    run.label = request.label;
    run.settings = request.settings;
    run.task = request.task;
    run.lengths = request.lengths;
    run.depths = request.depths;
    run.trials = request.trials;
    run.seed = request.seed;
    run.book_title = request.task == longscope::NeedleTask::Book ? request.bookTitle : QString();
    run.n_ctx_train = model.hparams().n_ctx_train;
    const auto t0 = std::chrono::steady_clock::now();
    try {
        longscope::NeedleOptions o;
        o.task = request.task;
        o.lengths.assign(request.lengths.begin(), request.lengths.end());
        o.depths.assign(request.depths.begin(), request.depths.end());
        o.trials = request.trials;
        o.seed = request.seed;
        if (request.task == longscope::NeedleTask::Book)
            o.book.assign(book.begin(), book.end());
        o.n_threads = nThreads;
        o.settings = request.settings;
        o.progress = [&](int64_t done, int64_t total) { return !progress || progress(done, total); };
        o.metrics = [&](const longscope::StepMetrics &m) {
            ++run.steps;
            run.peak_memory_bytes = std::max(run.peak_memory_bytes, qint64(m.memory.peak_total));
        };
        const longscope::NeedleResult r = longscope::needle_grid(model, o);
        run.settings.context_limit = r.n_ctx;
        run.cancelled = r.cancelled;
        for (const longscope::NeedleCell &c : r.cells)
            run.cells.append(NeedleGridCell{c.length, c.depth, c.actual_depth, c.trials, c.answer_tokens, c.log_prob,
                                            c.probability, c.mean_token_log_prob, c.retrieved});
    } catch (const std::bad_alloc &) {
        run.error = QStringLiteral("out of memory");
    } catch (const std::exception &e) {
        run.error = QString::fromUtf8(e.what());
    }
    run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    run.created = QDateTime::currentDateTimeUtc();
    return run;
}

} // namespace longscope::ui
