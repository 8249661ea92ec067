// The keyboard's view of a window or dialog, for the widget suites: the controls the Tab key
// reaches (QWidget::nextInFocusChain walked once around), the name a screen reader says for
// each (Qt's accessibility interface: the accessible name, the text, or the form label), and
// whether Tab goes through a part top to bottom and left to right as it is laid out.
#pragma once

#include <QAbstractScrollArea>
#include <QAccessible>
#include <QSet>
#include <QString>
#include <QStringList>
#include <QWidget>

namespace longscope::test {

// Every control under `root` (itself included) that takes the focus by Tab and is shown, in
// the order Tab visits them. Disabled controls are kept (they are named before they are
// enabled); a widget whose focus goes to a proxy, and the viewport of a scroll area, are not
// controls of their own.
inline QList<QWidget *> tabChain(QWidget *root)
{
    QList<QWidget *> out;
    QSet<QWidget *> seen;
    QWidget *w = root;
    do {
        seen.insert(w);
        if ((w == root || root->isAncestorOf(w)) && (w->focusPolicy() & Qt::TabFocus) &&
            w->isVisibleTo(root->window()) && !w->focusProxy()) {
            auto *area = qobject_cast<QAbstractScrollArea *>(w->parentWidget());
            if (!(area && area->viewport() == w))
                out << w;
        }
        w = w->nextInFocusChain();
    } while (w && !seen.contains(w));
    return out;
}

// What a screen reader says for `w`.
inline QString accessibleName(QWidget *w)
{
    QAccessibleInterface *a = QAccessible::queryAccessibleInterface(w);
    return a ? a->text(QAccessible::Name).trimmed() : QString();
}

// "QSpinBox contextBox" for the controls of `chain` without a name.
inline QStringList unnamedControls(const QList<QWidget *> &chain)
{
    QStringList unnamed;
    for (QWidget *c : chain)
        if (accessibleName(c).isEmpty())
            unnamed << QStringLiteral("%1 %2").arg(QString::fromLatin1(c->metaObject()->className()), c->objectName());
    return unnamed;
}

inline QString describeControl(QWidget *w)
{
    const QString name = accessibleName(w);
    return QStringLiteral("%1 \"%2\"").arg(QString::fromLatin1(w->metaObject()->className()), name);
}

// Where `w` is laid out, in `part`'s coordinates.
inline QRect placeIn(QWidget *w, QWidget *part)
{
    return QRect(w->mapTo(part, QPoint(0, 0)), w->size());
}

// The pairs of consecutive controls of `chain` inside `part` where Tab goes back up, or left
// within a row ("A -> B"). `sectionOf` (0 by default) puts parts of `part` apart, each laid
// out on its own (a footer under a scrolled area): a later section comes after every earlier
// one.
template <class Section>
QStringList tabOrderProblems(const QList<QWidget *> &chain, QWidget *part, Section sectionOf)
{
    QStringList problems;
    QWidget *prev = nullptr;
    for (QWidget *w : chain) {
        if (!part->isAncestorOf(w))
            continue;
        if (prev) {
            const QRect a = placeIn(prev, part);
            const QRect b = placeIn(w, part);
            const int sa = sectionOf(prev);
            const int sb = sectionOf(w);
            // A container (a scroll area) and then its content; below (a little overlap
            // allowed); or on the same row and to the right.
            const bool inside = prev->isAncestorOf(w);
            const bool below = b.top() >= a.bottom() - 4;
            const bool sameRowRight = b.top() < a.bottom() && b.bottom() > a.top() && b.left() >= a.right() - 4;
            if (sb < sa || (sb == sa && !inside && !below && !sameRowRight))
                problems << QStringLiteral("%1 -> %2").arg(describeControl(prev), describeControl(w));
        }
        prev = w;
    }
    return problems;
}

inline QStringList tabOrderProblems(const QList<QWidget *> &chain, QWidget *part)
{
    return tabOrderProblems(chain, part, [](QWidget *) { return 0; });
}

} // namespace longscope::test
