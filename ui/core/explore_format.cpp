#include "core/explore_format.h"

#include <cmath>

namespace longscope::ui {

QByteArray exploreCsvField(const QString &s)
{
    QByteArray b = s.toUtf8();
    if (b.contains(',') || b.contains('"') || b.contains('\n') || b.contains('\r')) {
        b.replace("\"", "\"\"");
        b = '"' + b + '"';
    }
    return b;
}

bool jsonWholeNumber(const QJsonValue &v, double lo, double hi, qint64 &out)
{
    if (!v.isDouble())
        return false;
    const double d = v.toDouble();
    if (!std::isfinite(d) || d < lo || d > hi || d != std::floor(d))
        return false;
    out = qint64(d);
    return true;
}

bool jsonFiniteNumber(const QJsonValue &v, double lo, double &out)
{
    if (!v.isDouble())
        return false;
    const double d = v.toDouble();
    if (!std::isfinite(d) || d < lo)
        return false;
    out = d;
    return true;
}

} // namespace longscope::ui
