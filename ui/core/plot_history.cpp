#include "core/plot_history.h"

#include "core/settings_json.h"

#include <QJsonArray>
#include <QLocale>
#include <QStringList>

#include <algorithm>
#include <cmath>

namespace longscope::ui {

namespace {

// A step line's fields; lines saved before the thread count was recorded have one fewer.
constexpr int kStepFields = 24;

QString number(double v) { return QString::number(v, 'g', QLocale::FloatingPointShortest); }

QString stepLine(const StepMetrics &m, int settingsIndex)
{
    const MemoryLedger &l = m.memory;
    QStringList f;
    f << QString::number(m.step) << (m.phase == StepPhase::Prefill ? QStringLiteral("p") : QStringLiteral("d"))
      << QString::number(m.n_tokens) << QString::number(m.position) << number(m.seconds)
      << number(m.tokens_per_second) << number(m.ntk_alpha) << number(m.rope_base)
      << QString::number(m.attention_tiles_skipped);
    for (uint64_t v : {l.weights, l.kv_reserved, l.kv_resident, l.scratch, l.total, l.peak_kv_reserved,
                       l.peak_kv_resident, l.peak_scratch, l.peak_total, l.process_rss, l.kv_bytes_copied,
                       l.device_used, l.device_free})
        f << QString::number(v);
    f << QString::number(settingsIndex) << QString::number(m.threads);
    return f.join(QLatin1Char(' '));
}

// Parses one step line; the settings index goes to `settingsIndex`. Empty string: fine.
QString parseStep(const QString &line, StepMetrics *m, int *settingsIndex)
{
    const QStringList f = line.split(QLatin1Char(' '), Qt::SkipEmptyParts);
    if (f.size() != kStepFields && f.size() != kStepFields - 1)
        return QStringLiteral("has %1 fields, not %2").arg(f.size()).arg(kStepFields);
    bool ok = true;
    auto integer = [&](int i) {
        bool good = false;
        const qlonglong v = f[i].toLongLong(&good);
        ok = ok && good && v >= 0;
        return v;
    };
    auto unsignedInt = [&](int i) {
        bool good = false;
        const qulonglong v = f[i].toULongLong(&good);
        ok = ok && good;
        return uint64_t(v);
    };
    auto real = [&](int i) {
        bool good = false;
        const double v = f[i].toDouble(&good);
        ok = ok && good && std::isfinite(v);
        return v;
    };
    m->step = integer(0);
    if (f[1] != QLatin1String("p") && f[1] != QLatin1String("d"))
        return QStringLiteral("has the phase '%1', not p or d").arg(f[1]);
    m->phase = f[1] == QLatin1String("p") ? StepPhase::Prefill : StepPhase::Decode;
    const qlonglong tokens = integer(2);
    const qlonglong position = integer(3);
    if (tokens > (1 << 30) || position > (1 << 30))
        return QStringLiteral("has a token count or position out of range");
    m->n_tokens = int(tokens);
    m->position = int(position);
    m->seconds = real(4);
    m->tokens_per_second = real(5);
    m->ntk_alpha = real(6);
    m->rope_base = real(7);
    m->attention_tiles_skipped = integer(8);
    MemoryLedger &l = m->memory;
    uint64_t *ledger[] = {&l.weights, &l.kv_reserved, &l.kv_resident, &l.scratch, &l.total, &l.peak_kv_reserved,
                          &l.peak_kv_resident, &l.peak_scratch, &l.peak_total, &l.process_rss, &l.kv_bytes_copied,
                          &l.device_used, &l.device_free};
    for (int i = 0; i < 13; ++i)
        *ledger[i] = unsignedInt(9 + i);
    *settingsIndex = int(std::min<qlonglong>(integer(22), 1 << 30));
    m->threads = f.size() == kStepFields ? int(std::min<qlonglong>(integer(23), 1 << 20)) : 0;
    return ok ? QString() : QStringLiteral("has a field that is not a valid number");
}

// The server samples of a saved run (none in runs saved before they existed). Empty: fine.
QString parseServer(const QJsonObject &json, PlotHistory *h)
{
    const QJsonValue lines = json.value(QStringLiteral("server"));
    if (lines.isUndefined())
        return {};
    if (!lines.isArray() || lines.toArray().size() > PlotHistory::kMaxSteps)
        return QStringLiteral("server samples must be a list of at most %1").arg(PlotHistory::kMaxSteps);
    h->serverEngine = json.value(QStringLiteral("server_engine")).toString().left(64);
    const QJsonArray array = lines.toArray();
    for (qsizetype i = 0; i < array.size(); ++i) {
        const QStringList f = array[i].toString().split(QLatin1Char(' '), Qt::SkipEmptyParts);
        double v[6];
        bool ok = f.size() == 6;
        for (int k = 0; ok && k < 6; ++k) {
            v[k] = f[k] == QLatin1String("-") && k >= 2 ? std::nan("") : f[k].toDouble(&ok);
            ok = ok || (f[k] == QLatin1String("-") && k >= 2);
        }
        if (!ok || v[0] < 0 || v[0] > (1 << 30))
            return QStringLiteral("server sample %1 is not six numbers (position, seconds, KV usage, running, "
                                  "waiting, tokens/s)")
                .arg(i + 1);
        h->server.push_back(ServerSample{int(v[0]), v[1], v[2], v[3], v[4], v[5]});
    }
    return {};
}

} // namespace

QString csvField(const QString &text)
{
    if (!text.contains(QLatin1Char(',')) && !text.contains(QLatin1Char('"')) && !text.contains(QLatin1Char('\n')) &&
        !text.contains(QLatin1Char('\r')))
        return text;
    QString quoted = text;
    quoted.replace(QLatin1Char('"'), QStringLiteral("\"\""));
    return QLatin1Char('"') + quoted + QLatin1Char('"');
}

int PlotHistory::markerAt(int position) const
{
    int found = 0;
    for (int i = 0; i < markers.size(); ++i)
        if (markers[i].position <= position)
            found = i + 1;
    return found;
}

QString PlotHistory::caption() const
{
    QStringList parts;
    parts << (model.isEmpty() ? QStringLiteral("no model") : model);
    if (run > 0)
        parts << QStringLiteral("run %1").arg(run);
    if (!steps.isEmpty()) {
        parts << describeSettings(steps.first().settings);
        parts << QStringLiteral("tokens %1–%2").arg(steps.first().position).arg(steps.last().position);
    }
    return parts.join(QStringLiteral(" · "));
}

QStringList PlotHistory::markerLines() const
{
    QStringList lines;
    for (int i = 0; i < markers.size(); ++i)
        lines << QStringLiteral("%1 at token %2: %3").arg(i + 1).arg(markers[i].position).arg(markers[i].label);
    return lines;
}

QByteArray PlotHistory::toCsv() const
{
    const QByteArray metricsHeader = QByteArray::fromStdString(metrics_csv_header());
    const bool withServer = !server.isEmpty();
    QByteArray out = "run,model,marker,settings," + metricsHeader;
    if (withServer)
        out += ",server_engine,server_seconds,server_kv_usage,server_requests_running,server_requests_waiting,"
               "server_generation_tokens_per_second";
    out += '\n';
    const QByteArray prefixRun = QByteArray::number(run) + ',' + csvField(model).toUtf8() + ',';
    for (const StepMetrics &m : steps) {
        out += prefixRun + QByteArray::number(markerAt(m.position)) + ',' +
               csvField(describeSettings(m.settings)).toUtf8() + ',' + QByteArray::fromStdString(metrics_csv_row(m));
        if (withServer)
            out += ",,,,,,";
        out += '\n';
    }
    if (!withServer)
        return out;
    const QList<QByteArray> columns = metricsHeader.split(',');
    auto value = [](double v) { return std::isfinite(v) ? number(v).toUtf8() : QByteArray(); };
    for (const ServerSample &s : server) {
        QList<QByteArray> cells;
        for (const QByteArray &c : columns)
            cells << (c == "position" ? QByteArray::number(s.position) : c == "phase" ? QByteArray("server") : QByteArray());
        out += prefixRun + QByteArray::number(markerAt(s.position)) + ",," + cells.join(',') + ',' +
               csvField(serverEngine).toUtf8() + ',' + value(s.seconds) + ',' + value(s.kv_usage) + ',' +
               value(s.requests_running) + ',' + value(s.requests_waiting) + ',' + value(s.generation_tokens_per_second);
        out += '\n';
    }
    return out;
}

QJsonObject PlotHistory::toJson() const
{
    QJsonArray settingsTable;
    QVector<Settings> distinct;
    QJsonArray stepLines;
    for (const StepMetrics &m : steps) {
        auto it = std::find(distinct.begin(), distinct.end(), m.settings);
        if (it == distinct.end()) {
            distinct.push_back(m.settings);
            settingsTable.append(settingsToJson(m.settings));
            it = distinct.end() - 1;
        }
        stepLines.append(stepLine(m, int(it - distinct.begin())));
    }
    QJsonArray markerArray;
    for (const PlotMarker &mk : markers)
        markerArray.append(QJsonObject{{QStringLiteral("position"), mk.position}, {QStringLiteral("label"), mk.label}});
    QJsonObject out{{QStringLiteral("run"), run},
                    {QStringLiteral("model"), model},
                    {QStringLiteral("settings"), settingsTable},
                    {QStringLiteral("steps"), stepLines},
                    {QStringLiteral("markers"), markerArray}};
    if (!server.isEmpty()) {
        // One line a sample: position, seconds, then the four quantities ("-": not published).
        QJsonArray serverLines;
        auto field = [](double v) { return std::isfinite(v) ? number(v) : QStringLiteral("-"); };
        for (const ServerSample &x : server)
            serverLines.append(QStringList{QString::number(x.position), number(x.seconds), field(x.kv_usage),
                                           field(x.requests_running), field(x.requests_waiting),
                                           field(x.generation_tokens_per_second)}
                                   .join(QLatin1Char(' ')));
        out.insert(QStringLiteral("server_engine"), serverEngine);
        out.insert(QStringLiteral("server"), serverLines);
    }
    return out;
}

std::optional<PlotHistory> PlotHistory::fromJson(const QJsonObject &json, QString *error)
{
    auto bad = [&](const QString &msg) -> std::optional<PlotHistory> {
        if (error)
            *error = QStringLiteral("plots: ") + msg;
        return std::nullopt;
    };
    PlotHistory h;
    const QJsonValue run = json.value(QStringLiteral("run"));
    if (!run.isDouble() || run.toDouble() < 0 || run.toDouble() > 1e9)
        return bad(QStringLiteral("missing or invalid run number"));
    h.run = run.toInt();
    const QJsonValue model = json.value(QStringLiteral("model"));
    if (!model.isString() || model.toString().size() > 4096)
        return bad(QStringLiteral("missing or invalid model name"));
    h.model = model.toString();

    const QJsonValue settingsValue = json.value(QStringLiteral("settings"));
    const QJsonValue stepsValue = json.value(QStringLiteral("steps"));
    const QJsonValue markersValue = json.value(QStringLiteral("markers"));
    if (!settingsValue.isArray() || !stepsValue.isArray() || !markersValue.isArray())
        return bad(QStringLiteral("settings, steps and markers must be lists"));
    QVector<Settings> table;
    for (const QJsonValue &v : settingsValue.toArray()) {
        QString why;
        const std::optional<Settings> s = v.isObject() ? settingsFromJson(v.toObject(), &why) : std::nullopt;
        if (!s)
            return bad(QStringLiteral("settings %1 are invalid%2").arg(table.size() + 1).arg(why.isEmpty() ? QString() : QStringLiteral(": ") + why));
        table.push_back(*s);
    }
    const QJsonArray stepArray = stepsValue.toArray();
    if (stepArray.size() > kMaxSteps)
        return bad(QStringLiteral("too many steps (%1)").arg(stepArray.size()));
    h.steps.reserve(stepArray.size());
    for (qsizetype i = 0; i < stepArray.size(); ++i) {
        if (!stepArray[i].isString())
            return bad(QStringLiteral("step %1 is not a line of numbers").arg(i + 1));
        StepMetrics m;
        int index = -1;
        if (const QString why = parseStep(stepArray[i].toString(), &m, &index); !why.isEmpty())
            return bad(QStringLiteral("step %1 %2").arg(i + 1).arg(why));
        if (index < 0 || index >= table.size())
            return bad(QStringLiteral("step %1 names settings %2 of %3").arg(i + 1).arg(index + 1).arg(table.size()));
        m.settings = table[index];
        h.steps.push_back(m);
    }
    const QJsonArray markerArray = markersValue.toArray();
    if (markerArray.size() > kMaxMarkers)
        return bad(QStringLiteral("too many markers (%1)").arg(markerArray.size()));
    for (qsizetype i = 0; i < markerArray.size(); ++i) {
        const QJsonObject o = markerArray[i].toObject();
        const QJsonValue position = o.value(QStringLiteral("position"));
        const QJsonValue label = o.value(QStringLiteral("label"));
        if (!position.isDouble() || position.toDouble() < 0 || position.toDouble() > (1 << 30) || !label.isString() ||
            label.toString().size() > 4096)
            return bad(QStringLiteral("marker %1 needs a position and a label").arg(i + 1));
        h.markers.push_back(PlotMarker{position.toInt(), label.toString()});
    }
    if (const QString why = parseServer(json, &h); !why.isEmpty())
        return bad(why);
    if (error)
        error->clear();
    return h;
}

} // namespace longscope::ui
