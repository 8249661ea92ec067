#include "core/perplexity_run.h"

#include "core/explore_format.h"
#include "core/settings_json.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonParseError>

#include <cmath>
#include <limits>

namespace longscope::ui {

namespace {

constexpr int k_version = 1;
constexpr double k_max_count = 9e15;
constexpr double k_max_ctx = double(1 << 24);
constexpr double k_max_text = double(std::numeric_limits<int>::max());

void setError(QString *error, const QString &message)
{
    if (error)
        *error = message;
}

QJsonArray curveToJson(const QVector<PerplexityPoint> &curve)
{
    QJsonArray points;
    for (const PerplexityPoint &p : curve)
        points.append(QJsonObject{{QStringLiteral("begin"), p.begin},
                                  {QStringLiteral("end"), p.end},
                                  {QStringLiteral("count"), double(p.count)},
                                  {QStringLiteral("mean_nll"), p.mean_nll}});
    return points;
}

// A curve's points, each with whole begin < end within `maxPosition`, a count and a finite NLL.
std::optional<QVector<PerplexityPoint>> curveFromJson(const QJsonArray &points, double maxPosition)
{
    QVector<PerplexityPoint> curve;
    for (const QJsonValue &v : points) {
        const QJsonObject o = v.toObject();
        PerplexityPoint p;
        qint64 begin = 0, end = 0;
        if (!jsonWholeNumber(o.value(QStringLiteral("begin")), 0, maxPosition, begin) ||
            !jsonWholeNumber(o.value(QStringLiteral("end")), 1, maxPosition, end) || end <= begin ||
            !jsonWholeNumber(o.value(QStringLiteral("count")), 0, k_max_count, p.count) ||
            !jsonFiniteNumber(o.value(QStringLiteral("mean_nll")), 0, p.mean_nll))
            return std::nullopt;
        p.begin = int(begin);
        p.end = int(end);
        curve.append(p);
    }
    return curve;
}

} // namespace

bool perplexityStreams(const longscope::Settings &settings)
{
    return settings.overflow == longscope::OverflowPolicy::Error || settings.overflow == longscope::OverflowPolicy::Shift;
}

double PerplexityPoint::perplexity() const { return std::exp(mean_nll); }

double PerplexityRunResult::perplexity() const { return std::exp(mean_nll); }

QJsonObject PerplexityRunResult::toJson() const
{
    QJsonObject json{{QStringLiteral("format"), format()},
                     {QStringLiteral("version"), k_version},
                     {QStringLiteral("id"), id},
                     {QStringLiteral("label"), label},
                     {QStringLiteral("settings"), settingsToJson(settings)},
                     {QStringLiteral("ctx"), ctx},
                     {QStringLiteral("bucket"), bucket},
                     {QStringLiteral("n_ctx_train"), n_ctx_train},
                     {QStringLiteral("model"), model_name},
                     {QStringLiteral("book"), book_title},
                     {QStringLiteral("created"), created.toUTC().toString(Qt::ISODateWithMs)},
                     {QStringLiteral("mean_nll"), mean_nll},
                     {QStringLiteral("perplexity"), perplexity()},
                     {QStringLiteral("n_scored"), double(n_scored)},
                     {QStringLiteral("n_total"), double(n_total)},
                     {QStringLiteral("windows"), windows},
                     {QStringLiteral("cancelled"), cancelled},
                     {QStringLiteral("seconds"), seconds},
                     {QStringLiteral("peak_memory_bytes"), double(peak_memory_bytes)},
                     {QStringLiteral("tokens_per_second"), tokens_per_second},
                     {QStringLiteral("steps"), steps},
                     {QStringLiteral("curve"), curveToJson(curve)},
                     {QStringLiteral("text_curve"), curveToJson(text_curve)},
                     {QStringLiteral("streamed"), streamed}};
    if (!stopped.isEmpty())
        json.insert(QStringLiteral("stopped"), stopped);
    if (!note.isEmpty())
        json.insert(QStringLiteral("note"), note);
    return json;
}

QByteArray PerplexityRunResult::toJsonBytes() const
{
    return QJsonDocument(toJson()).toJson(QJsonDocument::Indented);
}

std::optional<PerplexityRunResult> PerplexityRunResult::fromJson(const QJsonObject &j, QString *error)
{
    PerplexityRunResult r;
    if (!readRunHeader(j, format(), k_version, QStringLiteral("not a Longscope perplexity run"),
                       QStringLiteral("unsupported run file version"), r, error))
        return std::nullopt;

    qint64 ctx = 0, bucket = 0, train = 0, windows = 0, steps = 0;
    if (!jsonWholeNumber(j.value(QStringLiteral("ctx")), 2, k_max_ctx, ctx) ||
        !jsonWholeNumber(j.value(QStringLiteral("bucket")), 1, k_max_ctx, bucket) ||
        !jsonWholeNumber(j.value(QStringLiteral("n_ctx_train")), 0, k_max_ctx, train) ||
        !jsonWholeNumber(j.value(QStringLiteral("windows")), 0, k_max_count, windows) ||
        !jsonWholeNumber(j.value(QStringLiteral("steps")), 0, k_max_count, steps) ||
        !jsonWholeNumber(j.value(QStringLiteral("n_scored")), 0, k_max_count, r.n_scored) ||
        !jsonWholeNumber(j.value(QStringLiteral("n_total")), 0, k_max_count, r.n_total) ||
        !jsonWholeNumber(j.value(QStringLiteral("peak_memory_bytes")), 0, k_max_count, r.peak_memory_bytes) ||
        !jsonFiniteNumber(j.value(QStringLiteral("mean_nll")), 0, r.mean_nll) ||
        !jsonFiniteNumber(j.value(QStringLiteral("seconds")), 0, r.seconds) ||
        !jsonFiniteNumber(j.value(QStringLiteral("tokens_per_second")), 0, r.tokens_per_second)) {
        setError(error, QStringLiteral("a number is missing or out of range"));
        return std::nullopt;
    }
    r.ctx = int(ctx);
    r.bucket = int(bucket);
    r.n_ctx_train = int(train);
    r.windows = int(windows);
    r.steps = int(steps);

    const QJsonValue curve = j.value(QStringLiteral("curve"));
    if (!curve.isArray()) {
        setError(error, QStringLiteral("the curve is missing"));
        return std::nullopt;
    }
    std::optional<QVector<PerplexityPoint>> points = curveFromJson(curve.toArray(), k_max_ctx);
    if (!points) {
        setError(error, QStringLiteral("a curve point is malformed"));
        return std::nullopt;
    }
    r.curve = std::move(*points);
    // Kept since runs stream through their context; absent in older files.
    const QJsonValue textCurve = j.value(QStringLiteral("text_curve"));
    const QJsonValue streamed = j.value(QStringLiteral("streamed"));
    const QJsonValue stopped = j.value(QStringLiteral("stopped"));
    if ((!textCurve.isUndefined() && !textCurve.isArray()) || (!streamed.isUndefined() && !streamed.isBool()) ||
        (!stopped.isUndefined() && !stopped.isString())) {
        setError(error, QStringLiteral("text_curve, streamed or stopped has the wrong type"));
        return std::nullopt;
    }
    points = curveFromJson(textCurve.toArray(), k_max_text);
    if (!points) {
        setError(error, QStringLiteral("a text curve point is malformed"));
        return std::nullopt;
    }
    r.text_curve = std::move(*points);
    r.streamed = streamed.toBool();
    r.stopped = stopped.toString();
    r.note = j.value(QStringLiteral("note")).toString(); // absent (empty) in most runs
    return r;
}

std::optional<PerplexityRunResult> PerplexityRunResult::fromJsonBytes(const QByteArray &bytes, QString *error)
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

} // namespace longscope::ui
