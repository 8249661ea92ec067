// Which chat template renders a model's conversations: its own (the GGUF's or
// tokenizer_config.json's), a named built-in format, or a custom Jinja template the user wrote.
// Remembered per model path in the settings file.
#pragma once

#include <QString>

class QSettings;

namespace longscope::ui {

struct ChatTemplateChoice {
    enum class Kind { Model, Builtin, Custom };
    Kind kind = Kind::Model;
    QString builtin; // Builtin: the format's name (chatml, llama-3, ...)
    QString custom;  // Custom: the Jinja text

    bool operator==(const ChatTemplateChoice &) const = default;

    // As ChatRenderOptions takes it: the template text and the format name (both empty: the
    // model's own).
    QString templateText() const { return kind == Kind::Custom ? custom : QString(); }
    QString formatName() const { return kind == Kind::Builtin ? builtin : QString(); }
};

// The choice stored for `modelPath` (the model's own when none is, or what is stored is not
// valid), and storing one (the model's own removes the entry).
ChatTemplateChoice loadChatTemplateChoice(const QSettings &settings, const QString &modelPath);
void saveChatTemplateChoice(QSettings &settings, const QString &modelPath, const ChatTemplateChoice &choice);

} // namespace longscope::ui
