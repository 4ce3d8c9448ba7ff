// A failed trial's headline from the end of its standard error, and the errors of an
// experiment grouped by it.
#include "tune/trial/error_headline.hpp"

#include <gtest/gtest.h>

namespace tune {
namespace {

struct headline_case {
  const char* name;
  std::string stderr_tail;
  std::string headline;
};

const std::string traceback =
    "Traceback (most recent call last):\n"
    "  File \"/tmp/x/trials/trial-00001@k/mnist.py\", line 120, in <module>\n"
    "    main()\n"
    "  File \"/usr/lib/python3/dist-packages/torchvision/datasets/mnist.py\", line 99, in download\n"
    "    raise RuntimeError(f\"Error downloading {filename}\")\n"
    "RuntimeError: Error downloading train-images-idx3-ubyte.gz\n";

const std::string exit_warning = "<frozen abc>:119: FutureWarning: `torch.distributed.reduce_op` is deprecated\n";

const std::vector<headline_case> headline_cases = {
    {"TracebackAlone", traceback, "RuntimeError: Error downloading train-images-idx3-ubyte.gz"},
    {"TracebackThenWarnings",
     "starting\n" + traceback + exit_warning +
         "/usr/lib/python3/site.py:12: UserWarning: something\n  warnings.warn(\"something\")\n"
         "WARNING:root:closing down\n",
     "RuntimeError: Error downloading train-images-idx3-ubyte.gz"},
    {"TwoTracebacksTheLastCounts",
     traceback + "retrying\nTraceback (most recent call last):\n  File \"t.py\", line 3, in <module>\n    f()\n"
                 "KeyError: 'lr'\n",
     "KeyError: 'lr'"},
    {"DuringHandlingOfTheAboveException",
     "Traceback (most recent call last):\n  File \"t.py\", line 2, in <module>\n    d['x']\nKeyError: 'x'\n\n"
     "During handling of the above exception, another exception occurred:\n\n"
     "Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\n    raise ValueError('no x')\n"
     "ValueError: no x\n",
     "ValueError: no x"},
    {"RaiseFromChain",
     "Traceback (most recent call last):\n  File \"t.py\", line 2, in load\nOSError: [Errno 2] No such file\n\n"
     "The above exception was the direct cause of the following exception:\n\n"
     "Traceback (most recent call last):\n  File \"t.py\", line 6, in <module>\n"
     "RuntimeError: cannot load the data set\n" + exit_warning,
     "RuntimeError: cannot load the data set"},
    {"MultiLineMessageUpToTheBlankLine",
     "Traceback (most recent call last):\n  File \"t.py\", line 6, in <module>\n"
     "RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: \"fc.weight\".\n\n"
     "some later output\n",
     "RuntimeError: Error(s) in loading state_dict for Net: Missing key(s) in state_dict: \"fc.weight\"."},
    {"MultiLineMessageStopsAtAWarning",
     "Traceback (most recent call last):\n  File \"t.py\", line 6, in <module>\nValueError: first\nsecond\n" + exit_warning,
     "ValueError: first second"},
    {"SyntaxErrorInTheMainScriptHasNoHeader",
     "  File \"/tmp/x/trials/trial-00002@k/train.py\", line 3\n    def f(\n         ^\nSyntaxError: '(' was never closed\n",
     "SyntaxError: '(' was never closed (train.py, line 3)"},
    {"SyntaxErrorInAnImportedModule",
     "Traceback (most recent call last):\n  File \"main.py\", line 1, in <module>\n    import model\n"
     "  File \"/w/model.py\", line 7\n    x = = 1\n        ^\nSyntaxError: invalid syntax\n",
     "SyntaxError: invalid syntax (model.py, line 7)"},
    {"ExceptionIgnoredAtExitIsNotTheCause",
     traceback + "Exception ignored in: <function _ConnectionBase.__del__ at 0x7f>\nTraceback (most recent call last):\n"
                 "  File \"connection.py\", line 132, in __del__\nOSError: [Errno 9] Bad file descriptor\n",
     "RuntimeError: Error downloading train-images-idx3-ubyte.gz"},
    {"AHeaderCutOffTheTail", "    main()\n  File \"t.py\", line 9, in main\n    run()\nMemoryError\n", "MemoryError"},
    {"NotPython", "ls: cannot access 'data': No such file or directory\n", "ls: cannot access 'data': No such file or directory"},
    {"CppTerminate",
     "loading\nterminate called after throwing an instance of 'std::runtime_error'\n  what():  boom\n",
     "terminate called after throwing an instance of 'std::runtime_error': boom"},
    {"LastLineThatIsNotAWarning",
     "cannot open /data/x.npz\nWarning: leaked semaphore\nwarning: something\n[W socket.cpp:663] [c10d] hostname\n"
     "W1201 12:00:00.000000 123 x.cc:1] slow\n2024-01-01 12:00:00.123456: I tensorflow/core/x.cc:1] info\n",
     "cannot open /data/x.npz"},
    {"OnlyWarningsGiveTheLast", "a.py:1: UserWarning: one\n  warnings.warn('one')\nb.py:2: DeprecationWarning: two\n",
     "b.py:2: DeprecationWarning: two"},
    {"Empty", "", ""},
    {"OnlyBlankLines", "\n  \r\n\n", ""},
    {"CrlfLineEnds",
     "Traceback (most recent call last):\r\n  File \"t.py\", line 1, in <module>\r\nValueError: bad\r\n" + exit_warning,
     "ValueError: bad"},
    {"NoTrailingNewline", "first\nthe end", "the end"},
    {"AProgressBarShowsItsLastDrawing", "10%|#   |\r50%|##  |\r100%|####|\n", "100%|####|"},
    {"ColourCodesAreDropped", "\x1b[31mERROR\x1b[0m: out of cards\n", "ERROR: out of cards"},
    {"IllFormedUtf8BecomesTheReplacementCharacter", "bad \xff\xfe byte\n", "bad \xEF\xBF\xBD\xEF\xBF\xBD byte"},
    {"AnExceptionGroup",
     "  + Exception Group Traceback (most recent call last):\n  |   File \"/tmp/t4.py\", line 4, in <module>\n"
     "  |     raise ExceptionGroup(\"grp\", [e, ValueError(\"v\")])\n  | ExceptionGroup: grp (2 sub-exceptions)\n"
     "  +-+---------------- 1 ----------------\n    | E: boom\n    | a note\n    +---------------- 2 ----------------\n"
     "    | ValueError: v\n    +------------------------------------\n",
     "ExceptionGroup: grp (2 sub-exceptions)"},
    {"WarningsAsErrorsRaiseAWarningAsTheException",
     "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nUserWarning: deprecated thing\n",
     "UserWarning: deprecated thing"},
};

class Headline : public testing::TestWithParam<headline_case> {};

TEST_P(Headline, IsTheCause) { EXPECT_EQ(error_headline(GetParam().stderr_tail), GetParam().headline); }

INSTANTIATE_TEST_SUITE_P(ErrorHeadline, Headline, testing::ValuesIn(headline_cases),
                         [](const testing::TestParamInfo<headline_case>& i) { return std::string{i.param.name}; });

TEST(ErrorHeadline, AVeryLongLineIsCutOnACharacterBoundary) {
  std::string line = "ValueError: ";
  for (int i = 0; i < 1000; ++i) line += "\xC3\xA9";  // é, two bytes
  auto h = error_headline("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n" + line + "\n");
  ASSERT_LE(h.size(), headline_bytes);
  EXPECT_GE(h.size(), headline_bytes - 4);
  EXPECT_EQ(h.substr(h.size() - 3), "...");
  EXPECT_EQ(h.substr(0, 12), "ValueError: ");
  EXPECT_EQ((h.size() - 3 - 12) % 2, 0u) << "an é cut in two";
  std::string huge(1 << 20, 'x');
  EXPECT_EQ(error_headline(huge).size(), headline_bytes);
}

TEST(ErrorHeadline, AMessageOfManyLinesIsCapped) {
  std::string tail = "Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\nValueError: 0\n";
  for (int i = 1; i < 100; ++i) tail += std::to_string(i) + "\n";
  EXPECT_EQ(error_headline(tail), "ValueError: 0 1 2 3 4 5 6 7 8");
}

struct kind_case {
  std::string error, kind;
};

TEST(ErrorKind, IsTheHeadlineOfAProcessEnd) {
  for (auto& c : std::vector<kind_case>{
           {"the trial's process ended with exit code 1: RuntimeError: x: y", "RuntimeError: x: y"},
           {"the trial's process ended with exit code 1 after the stop request: KeyError: 'a'", "KeyError: 'a'"},
           {"the trial's process ended with killed by signal 11 (Segmentation fault): core", "core"},
           {"the trial's process ended with exit code 3", "the trial's process ended with exit code 3"},
           {"the trial's process ended with exit code 1: ValueError: v (failed 3 times)", "ValueError: v"},
           {"killed on request", "killed on request"},
           {"it reported acc = nan, not a finite number (failed 2 times)", "it reported acc = nan, not a finite number"},
           {"ValueError: (failed x times)", "ValueError: (failed x times)"},
       })
    EXPECT_EQ(error_kind(c.error), c.kind) << c.error;
}

TEST(ErrorSummary, OneLinePerKindTheMostFrequentFirst) {
  std::string ended = "the trial's process ended with exit code 1: ";
  std::vector<errored_trial> trials;
  trials.push_back({"trial-00001", ended + "KeyError: 'lr'", "d/trials/trial-00001/stderr"});
  for (int i = 2; i <= 4; ++i) {
    auto id = "trial-0000" + std::to_string(i);
    trials.push_back({id, ended + "FileNotFoundError: /w/trials/" + id + "@k/data (failed 2 times)", "d/trials/" + id + "/stderr"});
  }
  trials.push_back({"trial-00005", "the trial's process ended with exit code 3", ""});
  auto lines = error_summary(trials);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "3 trials: FileNotFoundError: /w/trials/trial-00002@k/data (see d/trials/trial-00002/stderr)");
  EXPECT_EQ(lines[1], "1 trial: KeyError: 'lr' (see d/trials/trial-00001/stderr)");
  EXPECT_EQ(lines[2], "1 trial: the trial's process ended with exit code 3");
  EXPECT_TRUE(error_summary({}).empty());
}

TEST(ErrorSummary, ManyKindsEndWithHowManyMore) {
  std::vector<errored_trial> trials;
  for (int i = 0; i < 14; ++i) trials.push_back({'t' + std::to_string(i), 'E' + std::to_string(i), ""});
  auto lines = error_summary(trials, 10);
  ASSERT_EQ(lines.size(), 11u);
  EXPECT_EQ(lines[0], "1 trial: E0");
  EXPECT_EQ(lines[10], "... and 4 more kinds of error");
  EXPECT_EQ(error_summary(std::vector<errored_trial>(trials.begin(), trials.begin() + 11), 10).back(),
            "... and 1 more kind of error");
}

}  // namespace
}  // namespace tune
