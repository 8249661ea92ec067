// Everything the window exports: the conversation (Markdown, JSON; the current one or a
// saved one from the sidebar), the live plots (PNG, CSV: the run shown, named after its model
// and number) and the exploration (PNG, CSV).
// Each asks where to write through the window's dialogs, writes, and reports.
#pragma once

#include <QObject>
#include <QString>

#include <functional>

class QMenu;

namespace longscope::ui {

class ChatController;
class ConversationListModel;
class ConversationStore;
class ExploreView;
class MetricsPlots;

class Exports : public QObject {
    Q_OBJECT

public:
    // The window's dialogs and status bar (virtual there, so tests can answer them).
    struct Hooks {
        std::function<QString(const QString &caption, const QString &suggestedName, const QString &filter)> chooseSaveFile;
        std::function<void(const QString &title, const QString &text)> showError;
        std::function<void(const QString &text)> showStatus;
        std::function<QString()> systemPrompt; // what the current conversation is exported with
    };

    Exports(ChatController *chat, ConversationStore *store, ConversationListModel *conversations,
            MetricsPlots *plots, ExploreView *explore, Hooks hooks, QObject *parent = nullptr);

    // File > Export…: the six actions.
    void addMenuActions(QMenu *menu);

    bool conversationMarkdown(const QString &path);
    bool conversationJson(const QString &path);
    bool plotsPng(const QString &path);
    bool plotsCsv(const QString &path);
    bool explorationPng(const QString &path);
    bool explorationCsv(const QString &path);

    // A saved conversation (the sidebar's Export): asks where, then writes.
    void savedConversationMarkdown(const QString &id);
    void savedConversationJson(const QString &id);

    // "conversation" for a title with nothing usable in a file name.
    static QString safeFileName(const QString &title);

private:
    // Asks for a path (suggested name, filter), runs `write` on it and says so when it worked.
    void askAndWrite(const QString &caption, const QString &suggestedName, const QString &filter,
                     const std::function<bool(const QString &)> &write);
    bool reportFailure(bool ok, const QString &error);
    QString savedTitle(const QString &id) const;
    // "longscope-stories260K-run3.png": the run the plots show.
    QString plotsFileName(const QString &suffix) const;

    ChatController *m_chat;
    ConversationStore *m_store;
    ConversationListModel *m_conversations;
    MetricsPlots *m_plots;
    ExploreView *m_explore;
    Hooks m_hooks;
};

} // namespace longscope::ui
