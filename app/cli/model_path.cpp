#include "model_path.h"

#include "args.h"

#include <cstdlib>
#include <filesystem>
#include <vector>

namespace longscope::cli {

namespace fs = std::filesystem;

std::string default_model_path(const char *argv0)
{
    std::vector<fs::path> candidates;
    if (const char *env = std::getenv("LONGSCOPE_MODEL"); env && *env)
        return env;
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (ec && argv0)
        exe = fs::absolute(argv0, ec);
    if (!exe.empty()) {
        const fs::path bindir = exe.parent_path();
        candidates.push_back(bindir / ".." / LONGSCOPE_INSTALL_MODEL_DIR / "stories260K.gguf");
        candidates.push_back(bindir / "models" / "stories260K.gguf");
    }
    candidates.push_back(LONGSCOPE_SOURCE_MODEL);
    for (const fs::path &p : candidates)
        if (fs::is_regular_file(p, ec))
            return fs::weakly_canonical(p, ec).string();
    throw UsageError("no model given and the bundled model was not found; pass -m MODEL");
}

} // namespace longscope::cli
