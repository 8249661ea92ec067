#include "support/vocab_files.h"

#include <zlib.h>

#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace longscope::test {

namespace {

const std::string kVocabDir = std::string(LONGSCOPE_TEST_DATA) + "/vocab/";

std::string read_all(const std::string &path)
{
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw std::runtime_error(path + ": cannot open");
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

} // namespace

std::string read_gz(const std::string &gz)
{
    gzFile f = gzopen(gz.c_str(), "rb");
    if (f == nullptr)
        throw std::runtime_error(gz + ": cannot open");
    std::string bytes;
    char buf[1 << 16];
    int n = 0;
    while ((n = gzread(f, buf, sizeof buf)) > 0)
        bytes.append(buf, size_t(n));
    const bool ok = n == 0;
    gzclose(f);
    if (!ok)
        throw std::runtime_error(gz + ": not valid gzip");
    return bytes;
}

std::string unpack_vocab(const std::string &name, const std::string &dir)
{
    const std::string bytes = read_gz(kVocabDir + "ggml-vocab-" + name + ".gguf.gz");
    const std::string out = dir + "/ggml-vocab-" + name + ".gguf";
    std::ofstream o(out, std::ios::binary);
    o.write(bytes.data(), std::streamsize(bytes.size()));
    if (!o)
        throw std::runtime_error(out + ": cannot write");
    return out;
}

std::vector<std::pair<std::string, std::vector<int32_t>>> vocab_vectors(const std::string &name)
{
    const std::string base = kVocabDir + "ggml-vocab-" + name + ".gguf";
    const std::string raw = read_all(base + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    size_t pos = 0;
    while (pos < raw.size()) {
        const size_t next = raw.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(raw.substr(pos));
            break;
        }
        texts.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::istringstream out(read_all(base + ".out"));
    std::vector<std::pair<std::string, std::vector<int32_t>>> vectors;
    std::string line;
    for (size_t i = 0; std::getline(out, line); ++i) {
        if (i >= texts.size())
            throw std::runtime_error(base + ".out: more lines than .inp has texts");
        std::istringstream ids(line);
        std::vector<int32_t> v;
        for (long id = 0; ids >> id;)
            v.push_back(int32_t(id));
        vectors.emplace_back(texts[i], std::move(v));
    }
    if (vectors.size() != texts.size())
        throw std::runtime_error(base + ": .inp has " + std::to_string(texts.size()) + " texts, .out " +
                                 std::to_string(vectors.size()) + " lines");
    return vectors;
}

} // namespace longscope::test
