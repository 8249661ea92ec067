// What the Explore tab's files share: CSV fields for the exports, and the checked numbers of
// the saved runs' JSON.
#pragma once

#include <QByteArray>
#include <QJsonValue>
#include <QString>

namespace longscope::ui {

// One CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180), UTF-8.
QByteArray exploreCsvField(const QString &s);

// A JSON number that is a whole number in [lo, hi].
bool jsonWholeNumber(const QJsonValue &v, double lo, double hi, qint64 &out);
// A finite JSON number of at least lo.
bool jsonFiniteNumber(const QJsonValue &v, double lo, double &out);

} // namespace longscope::ui
