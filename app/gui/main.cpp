// The Longscope desktop application: parses the command line, builds the main window and,
// for automation, streams a book, sends a prompt, explores a book's perplexity by position
// and renders the window to a PNG.
#include "core/chat_model.h"
#include "core/explore_presets.h"
#include "widgets/chat_panel.h"
#include "widgets/chat_view.h"
#include "widgets/explore_plot.h"
#include "widgets/explore_settings_list.h"
#include "widgets/explore_view.h"
#include "widgets/main_window.h"
#include "widgets/metrics_plots.h"

#include "longscope/backend.h"
#include "longscope/cpu_options.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QFileInfo>
#include <QIcon>
#include <QPixmap>
#include <QProgressBar>
#include <QRegularExpression>
#include <QSize>
#include <QTimer>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <tuple>

#ifndef LONGSCOPE_VERSION
#define LONGSCOPE_VERSION "0.0.0"
#endif

namespace {

constexpr const char *kUsage =
    "Usage: longscope [options]\n"
    "Local LLM chat and long-context explorer.\n"
    "\n"
    "Options:\n"
    "  -h, --help             Show this help and exit.\n"
    "  -v, --version          Show the version and exit.\n"
    "  --model PATH           Open this GGUF file or Hugging Face directory.\n"
    "  --book FILE            Once the model is loaded, open this .txt and stream it\n"
    "                         into the context.\n"
    "  --prompt TEXT          Once the model is loaded, send this message.\n"
    "  --explore BOOK         Once the model is loaded, open the Explore tab with this\n"
    "                         .txt and the preset settings, and score it with each.\n"
    "  --explore-ctx N        With --explore: the context length to score to (default\n"
    "                         2048; above the trained context is allowed).\n"
    "  --explore-windows N    With --explore: windows scored per setting (default 8).\n"
    "  --explore-presets NAME With --explore: the preset group to compare (the Presets\n"
    "                         menu's name, e.g. \"Sinks vs truncation\"; default the first).\n"
    "  --screenshot FILE      After the first reply (or once the book is streamed, or\n"
    "                         the exploration is done), save the window as a PNG and\n"
    "                         quit. Without --prompt, --book or --explore it sends\n"
    "                         \"Once upon a time\". With --book and --prompt: after the\n"
    "                         reply to the prompt sent once the book is in.\n"
    "  --screenshot-at N      With --screenshot: save it while the reply is being\n"
    "                         written, once it has N characters.\n"
    "  --screenshot-running   With --screenshot and --explore: save it while the runs\n"
    "                         go, once the time left is estimated, then stop them.\n"
    "  --export-plots FILE    With --screenshot: also export the live plots (with\n"
    "                         --explore: the perplexity plot) as PNG, as File > Export\n"
    "                         does.\n"
    "  --window-size WxH      The window's size (default 1600x1000 with --screenshot).\n";

// --version and --help must work without a display, so they are answered before
// QApplication (which needs a platform plugin) is constructed.
int answerWithoutDisplay(int argc, char **argv)
{
    for (int i = 1; i < argc; ++i) {
        const char *a = argv[i];
        if (std::strcmp(a, "--") == 0)
            break;
        if (std::strcmp(a, "--version") == 0 || std::strcmp(a, "-v") == 0) {
            std::printf("longscope %s\n", LONGSCOPE_VERSION);
            return 0;
        }
        if (std::strcmp(a, "--help") == 0 || std::strcmp(a, "-h") == 0 || std::strcmp(a, "-?") == 0) {
            std::fputs(kUsage, stdout);
            return 0;
        }
        // Skip the value of options that take one, so a prompt such as "--help" is text.
        if (std::strcmp(a, "--model") == 0 || std::strcmp(a, "--book") == 0 ||
            std::strcmp(a, "--prompt") == 0 || std::strcmp(a, "--screenshot") == 0 ||
            std::strcmp(a, "--explore") == 0 || std::strcmp(a, "--explore-ctx") == 0 ||
            std::strcmp(a, "--explore-windows") == 0 || std::strcmp(a, "--explore-presets") == 0 || std::strcmp(a, "--screenshot-at") == 0 || std::strcmp(a, "--export-plots") == 0 ||
            std::strcmp(a, "--window-size") == 0)
            ++i;
    }
    return -1;
}

} // namespace

int main(int argc, char **argv)
{
    // The engine reads no environment variable: the switches it documents (docs/performance.md,
    // docs/cuda.md) are read here, before the first model is loaded or backend probed.
    longscope::set_cpu_options(longscope::cpu_options_from_switches([](const char *name) { return std::getenv(name); }));
    if (const char *plugin = std::getenv("LONGSCOPE_CUDA_PLUGIN"); plugin && *plugin)
        longscope::set_backend_options(longscope::BackendOptions{plugin});
    if (const int rc = answerWithoutDisplay(argc, argv); rc >= 0)
        return rc;

    QApplication app(argc, argv);
    longscope::ui::initResources();
    QApplication::setApplicationName(QStringLiteral("Longscope"));
    QApplication::setOrganizationName(QStringLiteral("Longscope"));
    QApplication::setApplicationDisplayName(QStringLiteral("Longscope"));
    QApplication::setApplicationVersion(QStringLiteral(LONGSCOPE_VERSION));
    QApplication::setWindowIcon(QIcon(QStringLiteral(":/longscope/icons/longscope.svg")));
    QGuiApplication::setDesktopFileName(QStringLiteral("longscope"));

    QCommandLineParser parser;
    parser.setApplicationDescription(QStringLiteral("Local LLM chat and long-context explorer"));
    parser.addHelpOption();
    parser.addVersionOption();
    const QCommandLineOption modelOption(QStringLiteral("model"), QStringLiteral("GGUF file or Hugging Face directory."),
                                         QStringLiteral("PATH"));
    const QCommandLineOption bookOption(QStringLiteral("book"), QStringLiteral("Stream this .txt once the model is loaded."),
                                        QStringLiteral("FILE"));
    const QCommandLineOption promptOption(QStringLiteral("prompt"), QStringLiteral("Send this message once the model is loaded."),
                                          QStringLiteral("TEXT"));
    const QCommandLineOption screenshotOption(QStringLiteral("screenshot"),
                                              QStringLiteral("Save the window as a PNG after the first reply and quit."),
                                              QStringLiteral("FILE"));
    const QCommandLineOption exploreOption(QStringLiteral("explore"),
                                           QStringLiteral("Score this .txt with the preset settings in the Explore tab."),
                                           QStringLiteral("BOOK"));
    const QCommandLineOption exploreCtxOption(QStringLiteral("explore-ctx"),
                                              QStringLiteral("With --explore: the context length to score to."),
                                              QStringLiteral("N"));
    const QCommandLineOption exploreWindowsOption(QStringLiteral("explore-windows"),
                                                  QStringLiteral("With --explore: windows scored per setting."),
                                                  QStringLiteral("N"));
    const QCommandLineOption explorePresetsOption(QStringLiteral("explore-presets"),
                                                  QStringLiteral("With --explore: the preset group to compare."),
                                                  QStringLiteral("NAME"));
    const QCommandLineOption screenshotAtOption(QStringLiteral("screenshot-at"),
                                                QStringLiteral("With --screenshot: save it during the reply, at N characters."),
                                                QStringLiteral("N"));
    const QCommandLineOption windowSizeOption(QStringLiteral("window-size"), QStringLiteral("The window's size."),
                                              QStringLiteral("WxH"));
    const QCommandLineOption exportPlotsOption(QStringLiteral("export-plots"),
                                               QStringLiteral("With --screenshot: also export the plots as PNG."),
                                               QStringLiteral("FILE"));
    const QCommandLineOption screenshotRunningOption(
        QStringLiteral("screenshot-running"),
        QStringLiteral("With --screenshot and --explore: save it while the runs go, once the time left is estimated."));
    parser.addOptions({modelOption, bookOption, promptOption, screenshotOption, exploreOption, exploreCtxOption,
                       exploreWindowsOption, explorePresetsOption, screenshotAtOption, windowSizeOption,
                       exportPlotsOption, screenshotRunningOption});
    parser.process(app);

    const QString explore = parser.value(exploreOption);
    int exploreCtx = 0;
    int exploreWindows = 0;
    for (const auto &[option, value, lo, hi] :
         {std::tuple{&exploreCtxOption, &exploreCtx, 16, 1 << 18}, std::tuple{&exploreWindowsOption, &exploreWindows, 1, 1000}}) {
        if (!parser.isSet(*option))
            continue;
        bool ok = false;
        *value = parser.value(*option).toInt(&ok);
        if (!ok || *value < lo || *value > hi) {
            std::fprintf(stderr, "longscope: --%s takes a whole number from %d to %d\n",
                         qPrintable(option->names().first()), lo, hi);
            return 2;
        }
        if (explore.isEmpty()) {
            std::fprintf(stderr, "longscope: --%s goes with --explore BOOK\n", qPrintable(option->names().first()));
            return 2;
        }
    }

    const QString explorePresets = parser.value(explorePresetsOption);
    if (!explorePresets.isEmpty()) {
        if (explore.isEmpty()) {
            std::fprintf(stderr, "longscope: --explore-presets goes with --explore BOOK\n");
            return 2;
        }
        QStringList names;
        for (const longscope::ui::ExplorePresetGroup &g : longscope::ui::explorePresetGroups())
            names << g.name;
        if (!names.contains(explorePresets)) {
            std::fprintf(stderr, "longscope: no preset group \"%s\" (there are: %s)\n", qPrintable(explorePresets),
                         qPrintable(names.join(QStringLiteral(", "))));
            return 2;
        }
    }

    QSize windowSize(1600, 1000);
    if (parser.isSet(windowSizeOption)) {
        const QRegularExpressionMatch m =
            QRegularExpression(QStringLiteral("^(\\d{3,5})x(\\d{3,5})$")).match(parser.value(windowSizeOption));
        if (!m.hasMatch()) {
            std::fprintf(stderr, "longscope: --window-size takes WIDTHxHEIGHT, e.g. 1366x768\n");
            return 2;
        }
        windowSize = QSize(m.captured(1).toInt(), m.captured(2).toInt());
    }
    int screenshotAt = 0;
    if (parser.isSet(screenshotAtOption)) {
        bool ok = false;
        screenshotAt = parser.value(screenshotAtOption).toInt(&ok);
        if (!ok || screenshotAt < 1 || screenshotAt > 1000000 || !parser.isSet(screenshotOption)) {
            std::fprintf(stderr, "longscope: --screenshot-at takes a whole number from 1 to 1000000 and goes with --screenshot\n");
            return 2;
        }
    }

    const QString screenshot = parser.value(screenshotOption);
    const QString exportPlots = parser.value(exportPlotsOption);
    const bool screenshotRunning = parser.isSet(screenshotRunningOption);
    if (screenshotRunning && (screenshot.isEmpty() || explore.isEmpty() || !exportPlots.isEmpty())) {
        std::fprintf(stderr, "longscope: --screenshot-running goes with --screenshot and --explore, without "
                             "--export-plots (nothing is plotted yet)\n");
        return 2;
    }
    if (!exportPlots.isEmpty() && screenshot.isEmpty()) {
        std::fprintf(stderr, "longscope: --export-plots goes with --screenshot\n");
        return 2;
    }
    const QString book = parser.value(bookOption);
    QString prompt = parser.value(promptOption);
    if (!screenshot.isEmpty() && prompt.isEmpty() && book.isEmpty() && explore.isEmpty())
        prompt = QStringLiteral("Once upon a time");

    longscope::ui::MainWindowOptions options;
    options.modelPath = parser.value(modelOption);
    if (!options.modelPath.isEmpty())
        options.modelPath = QFileInfo(options.modelPath).absoluteFilePath();
    options.interactive = screenshot.isEmpty(); // automation never blocks on a message box

    longscope::ui::MainWindow window(options);
    if (!screenshot.isEmpty() || parser.isSet(windowSizeOption))
        window.resize(windowSize);
    window.show();

    int exitCode = 0;
    bool shotTaken = false;
    // `delayMs`: let the plots' queued replot and the chat's coalesced render land first (0:
    // now, while a reply is still being written).
    auto takeScreenshot = [&](int code, int delayMs = 400) {
        if (shotTaken)
            return;
        shotTaken = true;
        exitCode = code;
        QTimer::singleShot(delayMs, &window, [&, code] {
            window.chatPanel()->chatView()->flush();
            window.metricsPlots()->replotNow();
            window.exploreView()->plot()->replotNow();
            const QPixmap pixmap = window.grab();
            QString error;
            if (!exportPlots.isEmpty() &&
                !(explore.isEmpty() ? window.metricsPlots()->exportPng(exportPlots, &error)
                                    : window.exploreView()->exportPng(exportPlots, &error))) {
                std::fprintf(stderr, "longscope: %s\n", qPrintable(error));
                exitCode = 1;
            }
            if (!pixmap.save(screenshot, "PNG")) {
                std::fprintf(stderr, "longscope: cannot write %s\n", qPrintable(screenshot));
                exitCode = 1;
            } else if (code == 0) {
                std::printf("%s\n", qPrintable(screenshot));
            }
            window.close();
            QApplication::exit(exitCode);
        });
    };

    bool started = false;
    QObject::connect(&window, &longscope::ui::MainWindow::modelReady, &window, [&] {
        if (started)
            return;
        started = true;
        if (!explore.isEmpty()) {
            longscope::ui::ExploreView *view = window.exploreView();
            if (!window.openExploreBook(QFileInfo(explore).absoluteFilePath())) {
                if (!screenshot.isEmpty())
                    takeScreenshot(1);
                return;
            }
            if (explorePresets.isEmpty())
                view->settingsList()->resetToPresets();
            else
                view->loadPresetGroup(explorePresets);
            if (exploreCtx > 0)
                view->setContextLength(exploreCtx);
            if (exploreWindows > 0)
                view->setWindowsPerRun(exploreWindows);
            if (!view->run() && !screenshot.isEmpty())
                takeScreenshot(1);
            return;
        }
        if (!book.isEmpty()) {
            if (window.openBook(QFileInfo(book).absoluteFilePath()))
                window.streamBook();
            else if (!screenshot.isEmpty())
                takeScreenshot(1);
            return;
        }
        if (!prompt.isEmpty())
            window.sendMessage(prompt);
    });
    if (!screenshot.isEmpty()) {
        if (!explore.isEmpty() && screenshotRunning) {
            // While the runs go: once the overall progress says how long is left.
            QProgressBar *overall = window.exploreView()->overallProgress();
            QObject::connect(overall, &QProgressBar::valueChanged, &window, [&, overall] {
                if (window.exploreView()->isRunning() && overall->text().contains(QLatin1String("left")) &&
                    !overall->text().contains(QLatin1String("estimating")))
                    takeScreenshot(0, 0);
            });
            QObject::connect(window.exploreView(), &longscope::ui::ExploreView::explorationFinished, &window,
                             [&] { takeScreenshot(1); }); // over before the time left was shown
        } else if (!explore.isEmpty())
            QObject::connect(window.exploreView(), &longscope::ui::ExploreView::explorationFinished, &window,
                             [&] { takeScreenshot(window.exploreView()->lastError().isEmpty() ? 0 : 1); });
        else if (!book.isEmpty() && prompt.isEmpty())
            QObject::connect(&window, &longscope::ui::MainWindow::bookStreamFinished, &window,
                             [&](bool stopped, int) { takeScreenshot(stopped ? 1 : 0); });
        else
            QObject::connect(&window, &longscope::ui::MainWindow::replyFinished, &window, [&] { takeScreenshot(0); });
        if (!book.isEmpty() && !prompt.isEmpty())
            QObject::connect(&window, &longscope::ui::MainWindow::bookStreamFinished, &window,
                             [&](bool stopped, int) {
                                 if (stopped) {
                                     takeScreenshot(1);
                                     return;
                                 }
                                 window.sendMessage(prompt);
                                 // A question refused before it starts ends no reply: the
                                 // window shows why.
                                 QTimer::singleShot(3000, &window, [&] {
                                     if (!window.isBusy())
                                         takeScreenshot(0);
                                 });
                             });
        if (screenshotAt > 0) {
            // Mid-reply: as soon as the streamed reply is long enough, while it still runs.
            longscope::ui::ChatModel *chat = window.chatController()->model();
            QObject::connect(chat, &QAbstractItemModel::dataChanged, &window, [&, chat] {
                const longscope::ui::Message last = chat->at(chat->count() - 1);
                if (window.isBusy() && last.role == longscope::ui::Message::Role::Assistant &&
                    last.text.size() >= screenshotAt)
                    takeScreenshot(0, 0);
            });
        }
        QObject::connect(&window, &longscope::ui::MainWindow::modelLoadFailed, &window, [&] {
            // A failed --model falls back to the bundled model; only give up with nothing loaded.
            QTimer::singleShot(2000, &window, [&] {
                if (!window.isModelLoaded() && window.activity() != longscope::ui::MainWindow::Activity::Loading)
                    takeScreenshot(1);
            });
        });
        // Never hang an automated run.
        QTimer::singleShot(10 * 60 * 1000, &window, [&] { takeScreenshot(1); });
    } else if (!prompt.isEmpty() && !book.isEmpty()) {
        // Interactive: after the book, ask the prompt.
        QObject::connect(&window, &longscope::ui::MainWindow::bookStreamFinished, &window,
                         [&](bool, int) { window.sendMessage(prompt); }, Qt::SingleShotConnection);
    }

    const int rc = QApplication::exec();
    return exitCode != 0 ? exitCode : rc;
}
