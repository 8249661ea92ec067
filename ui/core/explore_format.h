// What the Explore tab's files share: CSV fields for the exports, and the checked numbers of
// the saved runs' JSON.
#pragma once

#include "core/settings_json.h"

#include <QByteArray>
#include <QDateTime>
#include <QJsonObject>
#include <QJsonValue>
#include <QString>

namespace longscope::ui {

// One CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180), UTF-8.
QByteArray exploreCsvField(const QString &s);

// A JSON number that is a whole number in [lo, hi].
bool jsonWholeNumber(const QJsonValue &v, double lo, double hi, qint64 &out);
// A finite JSON number of at least lo.
bool jsonFiniteNumber(const QJsonValue &v, double lo, double &out);

// The fields both kinds of saved run (perplexity runs, needle grids) start with: the format
// (else `notThis`), the version in 1..maxVersion (else `badVersion`), id, label, model, book,
// created, cancelled and the settings. False with *error set when one is wrong.
template <class Run>
bool readRunHeader(const QJsonObject &j, const QString &format, qint64 maxVersion, const QString &notThis,
                   const QString &badVersion, Run &r, QString *error)
{
    const auto fail = [error](const QString &why) {
        if (error)
            *error = why;
        return false;
    };
    if (j.value(QStringLiteral("format")).toString() != format)
        return fail(notThis);
    qint64 version = 0;
    if (!jsonWholeNumber(j.value(QStringLiteral("version")), 1, double(maxVersion), version))
        return fail(badVersion);
    r.id = j.value(QStringLiteral("id")).toString();
    r.label = j.value(QStringLiteral("label")).toString();
    r.model_name = j.value(QStringLiteral("model")).toString();
    r.book_title = j.value(QStringLiteral("book")).toString();
    r.created = QDateTime::fromString(j.value(QStringLiteral("created")).toString(), Qt::ISODateWithMs);
    r.cancelled = j.value(QStringLiteral("cancelled")).toBool();
    QString why;
    const std::optional<longscope::Settings> settings = settingsFromJson(j.value(QStringLiteral("settings")).toObject(), &why);
    if (!settings)
        return fail(why);
    r.settings = *settings;
    return true;
}

} // namespace longscope::ui
