// The check the app-data harnesses share: bytes that parse must survive being written and
// read back (the second reading equals the first), as the app saves what it loaded.
#pragma once

#include "support.h"

#include <QByteArray>
#include <QJsonObject>

#include <cstddef>
#include <cstdint>

namespace longscope::fuzz {

// T has static fromJsonBytes(bytes, error) -> optional<T>, toJson() and toJsonBytes().
template <class T> void check_json_round_trip(const uint8_t *data, size_t size)
{
    QString why;
    const auto first = T::fromJsonBytes(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)), &why);
    if (!first) {
        check(!why.isEmpty(), "refused without saying why");
        return;
    }
    const QJsonObject saved = first->toJson();
    const auto second = T::fromJsonBytes(first->toJsonBytes(), &why);
    check(second.has_value(), "what was loaded cannot be read back once saved");
    check(second->toJson() == saved, "what was loaded changes when saved and read back");
}

} // namespace longscope::fuzz
