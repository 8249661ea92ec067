# QCustomPlot built against Qt 6 (Debian: libqcustomplot2.1-qt6 + libqcustomplot-dev). Defines
# the target Longscope::QCustomPlot. Debian's plain QCustomPlot CMake package is the Qt 5
# build, so look for the Qt 6 one by name and fall back to the library and header.
find_package(QCustomPlotQt6 CONFIG QUIET)
if(TARGET QCustomPlotQt6::QCustomPlotQt6)
  add_library(Longscope::QCustomPlot ALIAS QCustomPlotQt6::QCustomPlotQt6)
  set(LONGSCOPE_QCUSTOMPLOT_FOUND TRUE)
else()
  find_path(QCUSTOMPLOT_INCLUDE_DIR qcustomplot.h)
  find_library(QCUSTOMPLOT_LIBRARY NAMES QCustomPlotQt6 qcustomplot-qt6)
  if(QCUSTOMPLOT_INCLUDE_DIR AND QCUSTOMPLOT_LIBRARY)
    add_library(longscope_qcustomplot SHARED IMPORTED)
    set_target_properties(longscope_qcustomplot PROPERTIES
      IMPORTED_LOCATION "${QCUSTOMPLOT_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${QCUSTOMPLOT_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES "Qt6::Widgets;Qt6::PrintSupport")
    add_library(Longscope::QCustomPlot ALIAS longscope_qcustomplot)
    set(LONGSCOPE_QCUSTOMPLOT_FOUND TRUE)
  endif()
endif()
if(NOT LONGSCOPE_QCUSTOMPLOT_FOUND)
  message(FATAL_ERROR "QCustomPlot for Qt 6 not found: apt-get install libqcustomplot-dev libqcustomplot2.1-qt6")
endif()
