// The app's settings: the long-context settings JSON (stored in the settings file, in every
// saved run and conversation) must read back equal once written, and the settings file itself
// (an ini file read through AppSettings) must give valid values or the defaults.
#include "support.h"

#include "core/app_settings.h"
#include "core/settings_json.h"

#include <QByteArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QSettings>

#include <cstdint>
#include <cstdio>
#include <string>

using namespace longscope;

namespace {

void settings_json(const QByteArray &bytes)
{
    const QJsonDocument doc = QJsonDocument::fromJson(bytes);
    if (!doc.isObject())
        return;
    QString why;
    const std::optional<Settings> s = ui::settingsFromJson(doc.object(), &why);
    if (!s) {
        fuzz::check(!why.isEmpty(), "settings refused without saying why");
        return;
    }
    const std::optional<Settings> again = ui::settingsFromJson(ui::settingsToJson(*s), &why);
    fuzz::check(again.has_value() && *again == *s, "settings change when written and read back");
    (void)ui::describeSettings(*s);
}

void settings_file(const uint8_t *data, size_t size)
{
    // QSettings caches files by name: a new name per input.
    static unsigned counter = 0;
    const std::string path = fuzz::write_scratch("settings-" + std::to_string(counter++) + ".ini", data, size);
    {
        QSettings qs(QString::fromStdString(path), QSettings::IniFormat);
        ui::AppSettings app(&qs);
        (void)app.loadGenerationParams();
        const Settings engine = app.loadEngineSettings();
        try {
            engine.validate();
        } catch (const Error &) {
            fuzz::check(false, "the settings file gave long-context settings that do not validate");
        }
        (void)app.loadSystemPrompt();
        (void)app.loadRecentModels();
        (void)app.loadLastModel();
        (void)app.loadWindowGeometry();
        (void)app.loadWindowState();
    }
    std::remove(path.c_str());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    settings_json(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)));
    settings_file(data, size);
    return 0;
}
