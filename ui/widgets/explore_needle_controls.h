// The needle grid's controls in the Explore tab: the haystack (a pass key in filler text, or a
// fact in the book), the prompt lengths and needle depths as comma-separated lists, and the
// trials per cell. request() reads them into a NeedleRequest or says, in one line, what is
// wrong (a length that is not a whole number, a depth outside 0..1, too many cells).
#pragma once

#include "core/explore_needle.h"

#include <QGroupBox>

#include <optional>

class QComboBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace longscope::ui {

class ExploreNeedleControls : public QGroupBox {
    Q_OBJECT

public:
    explicit ExploreNeedleControls(QWidget *parent = nullptr);

    // Lengths around the trained context (half, once, twice), unless the user typed some.
    void setTrainedContext(int nCtxTrain);

    longscope::NeedleTask task() const;
    void setTask(longscope::NeedleTask task);
    void setLengths(const QVector<int> &lengths);
    void setDepths(const QVector<double> &depths);
    void setTrials(int trials);

    // The request (label and settings left empty), or nullopt with `error` set.
    std::optional<NeedleRequest> request(QString *error) const;

    QComboBox *taskBox() const { return m_task; }
    QLineEdit *lengthsEdit() const { return m_lengths; }
    QLineEdit *depthsEdit() const { return m_depths; }
    QSpinBox *trialsBox() const { return m_trials; }

signals:
    void changed();

private:
    void updateHint();

    QComboBox *m_task = nullptr;
    QLineEdit *m_lengths = nullptr;
    QLineEdit *m_depths = nullptr;
    QSpinBox *m_trials = nullptr;
    QLabel *m_hint = nullptr;
    bool m_lengthsTyped = false;
};

} // namespace longscope::ui
