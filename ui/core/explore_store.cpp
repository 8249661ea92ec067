#include "core/explore_store.h"

#include "core/read_file.h"
#include "core/store_files.h"

#include "core/conversation_store.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QStandardPaths>

#include <algorithm>

namespace longscope::ui {

namespace {

// A run file is a few kilobytes; anything far larger is not one.
constexpr qint64 k_max_file_bytes = 16LL * 1024 * 1024;
const QString k_suffix = QStringLiteral(".json");

void setError(QString *error, const QString &message) { setStoreError(error, message); }

// The format a run file names ("longscope-perplexity-run", ...), or empty.
QString fileFormat(const QByteArray &bytes)
{
    const QJsonDocument doc = QJsonDocument::fromJson(bytes);
    return doc.isObject() ? doc.object().value(QStringLiteral("format")).toString() : QString();
}

bool isRunFormat(const QString &format)
{
    return format == PerplexityRunResult::format() || format == NeedleRunResult::format();
}

} // namespace

ExploreStore::ExploreStore(const QString &dir, QObject *parent)
    : QObject(parent), m_dir(dir.isEmpty() ? defaultDirectory() : dir)
{
    QDir().mkpath(m_dir);
}

QString ExploreStore::defaultDirectory()
{
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) + QStringLiteral("/runs");
}

bool ExploreStore::isValidId(const QString &id)
{
    static const QRegularExpression re(QStringLiteral("^[A-Za-z0-9_-]{1,64}$"));
    return re.match(id).hasMatch();
}

QString ExploreStore::newId()
{
    return QDateTime::currentDateTimeUtc().toString(QStringLiteral("yyyyMMdd-HHmmss-zzz")) + QLatin1Char('-') +
           QString::number(QRandomGenerator::global()->generate() & 0xffffff, 16).rightJustified(6, QLatin1Char('0'));
}

QString ExploreStore::filePath(const QString &id) const
{
    return QDir(m_dir).filePath(id + k_suffix);
}

template <class Run>
std::optional<Run> ExploreStore::readFile(const QString &path, QString *error, bool *otherKind) const
{
    const std::optional<QByteArray> bytes = readRegularFile(path, k_max_file_bytes, error);
    if (!bytes)
        return std::nullopt;
    QString why;
    std::optional<Run> run = Run::fromJsonBytes(*bytes, &why);
    if (!run) {
        const QString format = fileFormat(*bytes);
        if (otherKind)
            *otherKind = format != Run::format() && isRunFormat(format);
        setError(error, QStringLiteral("%1: %2").arg(path, why));
        return std::nullopt;
    }
    // The file name is the id, whatever the file says.
    run->id = QFileInfo(path).completeBaseName();
    return run;
}

template <class Run>
QVector<Run> ExploreStore::listRuns()
{
    m_errors.clear();
    QVector<Run> out;
    const QFileInfoList files = QDir(m_dir).entryInfoList(QStringList{QStringLiteral("*.json")},
                                                          QDir::Files | QDir::Readable, QDir::Name);
    for (const QFileInfo &fi : files) {
        if (!isValidId(fi.completeBaseName())) {
            m_errors << QStringLiteral("%1: not a run file name").arg(fi.filePath());
            continue;
        }
        QString error;
        bool otherKind = false;
        std::optional<Run> run = readFile<Run>(fi.filePath(), &error, &otherKind);
        if (!run) {
            if (!otherKind)
                m_errors << error;
            continue;
        }
        out.push_back(std::move(*run));
    }
    std::stable_sort(out.begin(), out.end(), [](const Run &a, const Run &b) {
        if (a.created != b.created)
            return a.created > b.created;
        return a.id > b.id;
    });
    return out;
}

template <class Run>
std::optional<Run> ExploreStore::loadRun(const QString &id, QString *error)
{
    m_errors.clear();
    QString why;
    std::optional<Run> run;
    if (!isValidId(id))
        why = QStringLiteral("invalid run id \"%1\"").arg(id);
    else
        run = readFile<Run>(filePath(id), &why);
    if (!run) {
        m_errors << why;
        setError(error, why);
    }
    return run;
}

template <class Run>
bool ExploreStore::saveRun(Run &run, QString *error)
{
    m_errors.clear();
    if (run.id.isEmpty())
        run.id = newId();
    if (!isValidId(run.id)) {
        const QString msg = QStringLiteral("invalid run id \"%1\"").arg(run.id);
        m_errors << msg;
        setError(error, msg);
        return false;
    }
    if (!run.created.isValid())
        run.created = QDateTime::currentDateTimeUtc();
    QDir().mkpath(m_dir);
    QString why;
    if (!writeFileAtomically(filePath(run.id), run.toJsonBytes(), &why)) {
        m_errors << why;
        setError(error, why);
        return false;
    }
    emit runSaved(run.id);
    return true;
}

QVector<PerplexityRunResult> ExploreStore::list() { return listRuns<PerplexityRunResult>(); }

std::optional<PerplexityRunResult> ExploreStore::load(const QString &id, QString *error)
{
    return loadRun<PerplexityRunResult>(id, error);
}

bool ExploreStore::save(PerplexityRunResult &run, QString *error) { return saveRun(run, error); }

QVector<NeedleRunResult> ExploreStore::listNeedleRuns() { return listRuns<NeedleRunResult>(); }

std::optional<NeedleRunResult> ExploreStore::loadNeedleRun(const QString &id, QString *error)
{
    return loadRun<NeedleRunResult>(id, error);
}

bool ExploreStore::save(NeedleRunResult &run, QString *error) { return saveRun(run, error); }

bool ExploreStore::remove(const QString &id, QString *error)
{
    m_errors.clear();
    const QString msg = removeStoredFile(filePath(id), isValidId(id), QStringLiteral("saved run"), id);
    if (!msg.isEmpty()) {
        m_errors << msg;
        setError(error, msg);
        return false;
    }
    emit runRemoved(id);
    return true;
}

} // namespace longscope::ui
