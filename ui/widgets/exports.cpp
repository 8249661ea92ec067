#include "widgets/exports.h"

#include "core/chat_controller.h"
#include "core/conversation_list_model.h"
#include "core/conversation_store.h"
#include "widgets/explore_view.h"
#include "widgets/metrics_plots.h"

#include <QMenu>
#include <QRegularExpression>

namespace longscope::ui {

Exports::Exports(ChatController *chat, ConversationStore *store, ConversationListModel *conversations,
                 MetricsPlots *plots, ExploreView *explore, Hooks hooks, QObject *parent)
    : QObject(parent),
      m_chat(chat),
      m_store(store),
      m_conversations(conversations),
      m_plots(plots),
      m_explore(explore),
      m_hooks(std::move(hooks))
{
    connect(m_explore, &ExploreView::exportPngRequested, this, [this] {
        askAndWrite(tr("Export Exploration"), QStringLiteral("longscope-perplexity.png"), tr("PNG images (*.png)"),
                    [this](const QString &path) { return explorationPng(path); });
    });
    connect(m_explore, &ExploreView::exportCsvRequested, this, [this] {
        askAndWrite(tr("Export Exploration"), QStringLiteral("longscope-perplexity.csv"), tr("CSV files (*.csv)"),
                    [this](const QString &path) { return explorationCsv(path); });
    });
}

QString Exports::safeFileName(const QString &title)
{
    QString name = title;
    name.replace(QRegularExpression(QStringLiteral("[^\\w\\- ]+")), QStringLiteral(""));
    name = name.simplified().replace(QLatin1Char(' '), QLatin1Char('-')).left(48);
    return name.isEmpty() ? QStringLiteral("conversation") : name;
}

void Exports::addMenuActions(QMenu *file)
{
    file->addAction(tr("Export Conversation as &Markdown…"), this, [this] {
        askAndWrite(tr("Export Conversation"), safeFileName(m_chat->conversation().title()) + QStringLiteral(".md"),
                    tr("Markdown (*.md)"), [this](const QString &path) { return conversationMarkdown(path); });
    });
    file->addAction(tr("Export Conversation as &JSON…"), this, [this] {
        askAndWrite(tr("Export Conversation"), safeFileName(m_chat->conversation().title()) + QStringLiteral(".json"),
                    tr("JSON (*.json)"), [this](const QString &path) { return conversationJson(path); });
    });
    file->addAction(tr("Export Plots as &PNG…"), this, [this] {
        askAndWrite(tr("Export Plots"), plotsFileName(QStringLiteral("png")), tr("PNG images (*.png)"),
                    [this](const QString &path) { return plotsPng(path); });
    });
    file->addAction(tr("Export Plots as &CSV…"), this, [this] {
        askAndWrite(tr("Export Metrics"), plotsFileName(QStringLiteral("csv")), tr("CSV files (*.csv)"),
                    [this](const QString &path) { return plotsCsv(path); });
    });
    file->addAction(tr("Export E&xploration as PNG…"), m_explore, &ExploreView::exportPngRequested);
    file->addAction(tr("Export Exp&loration as CSV…"), m_explore, &ExploreView::exportCsvRequested);
}

QString Exports::plotsFileName(const QString &suffix) const
{
    const PlotHistory &run = m_plots->history();
    if (run.run == 0)
        return QStringLiteral("longscope-plots.") + suffix;
    return QStringLiteral("longscope-%1-run%2.%3").arg(safeFileName(run.model)).arg(run.run).arg(suffix);
}

void Exports::askAndWrite(const QString &caption, const QString &suggestedName, const QString &filter,
                          const std::function<bool(const QString &)> &write)
{
    const QString path = m_hooks.chooseSaveFile(caption, suggestedName, filter);
    if (!path.isEmpty() && write(path))
        m_hooks.showStatus(tr("Exported %1").arg(path));
}

bool Exports::reportFailure(bool ok, const QString &error)
{
    if (!ok)
        m_hooks.showError(tr("Export failed"), error);
    return ok;
}

bool Exports::conversationMarkdown(const QString &path)
{
    QString error;
    Conversation c = m_chat->conversation();
    c.setSystemPrompt(m_hooks.systemPrompt());
    return reportFailure(ConversationStore::exportMarkdown(c, path, &error), error);
}

bool Exports::conversationJson(const QString &path)
{
    QString error;
    Conversation c = m_chat->conversation();
    c.setSystemPrompt(m_hooks.systemPrompt());
    return reportFailure(ConversationStore::exportJson(c, path, &error), error);
}

bool Exports::plotsPng(const QString &path)
{
    QString error;
    return reportFailure(m_plots->exportPng(path, &error), error);
}

bool Exports::plotsCsv(const QString &path)
{
    QString error;
    return reportFailure(m_plots->exportCsv(path, &error), error);
}

bool Exports::explorationPng(const QString &path)
{
    QString error;
    return reportFailure(m_explore->exportPng(path, &error), error);
}

bool Exports::explorationCsv(const QString &path)
{
    QString error;
    return reportFailure(m_explore->exportCsv(path, &error), error);
}

QString Exports::savedTitle(const QString &id) const
{
    const int row = m_conversations->rowOf(id);
    return row >= 0 ? m_conversations->infoAt(row).title : id;
}

void Exports::savedConversationMarkdown(const QString &id)
{
    const QString path = m_hooks.chooseSaveFile(tr("Export Conversation"), safeFileName(savedTitle(id)) + QStringLiteral(".md"),
                                                tr("Markdown (*.md)"));
    if (path.isEmpty())
        return;
    QString error;
    if (!m_store->exportMarkdown(id, path, &error))
        m_hooks.showError(tr("Export failed"), error);
    else
        m_hooks.showStatus(tr("Exported %1").arg(path));
}

void Exports::savedConversationJson(const QString &id)
{
    const QString path = m_hooks.chooseSaveFile(tr("Export Conversation"), safeFileName(savedTitle(id)) + QStringLiteral(".json"),
                                                tr("JSON (*.json)"));
    if (path.isEmpty())
        return;
    QString error;
    if (!m_store->exportJson(id, path, &error))
        m_hooks.showError(tr("Export failed"), error);
    else
        m_hooks.showStatus(tr("Exported %1").arg(path));
}

} // namespace longscope::ui
