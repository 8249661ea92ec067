// Runs longscope-cli as a user would, through QProcess, for the CLI suites.
#pragma once

#include <QByteArray>
#include <QProcess>
#include <QProcessEnvironment>
#include <QStringList>

namespace longscope::test {

struct CliRun {
    int code = -1; // exit status; -1 when it crashed or hung
    QByteArray out;
    QByteArray err;
};

// `env_model` sets $LONGSCOPE_MODEL; otherwise it is removed so the bundled default is used.
// `extra_env` adds NAME=value pairs.
inline CliRun run_cli(const QStringList &args, const QByteArray &env_model = {}, const QStringList &extra_env = {})
{
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("LONGSCOPE_MODEL");
    env.remove("LONGSCOPE_SIMD");
    if (!env_model.isEmpty())
        env.insert("LONGSCOPE_MODEL", QString::fromUtf8(env_model));
    for (const QString &kv : extra_env)
        env.insert(kv.section(QLatin1Char('='), 0, 0), kv.section(QLatin1Char('='), 1));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(LONGSCOPE_CLI_PATH), args);
    if (!p.waitForFinished(300000)) {
        p.kill();
        p.waitForFinished();
        return {};
    }
    CliRun r;
    r.code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -1;
    r.out = p.readAllStandardOutput();
    r.err = p.readAllStandardError();
    return r;
}

} // namespace longscope::test
