// JSON Lines as documents (jsonl_documents.h): one document per line kept whole,
// blank lines and blank texts skipped, and each kind of bad line named as
// file:line in one message.

#include <doctest/doctest.h>

#include "apps/data/jsonl_documents.h"
#include "tests/apps/fanout/cli_runner.h"

using namespace fanout::data;
using fanout::test::error_of;
using fanout::test::has;

TEST_CASE("each JSON Lines line is one document, kept whole") {
  const std::string text =
      "{\"text\": \"First one.\\n\\nStill the first.\", \"id\": 1}\n"
      "\n"
      "   \r\n"
      "{\"id\": 2, \"text\": \"\"}\n"
      "{\"text\": \"  \\n \"}\n"
      "{\"body\": \"no\", \"text\": \"Caf\\u00e9 [EOT] x\"}\r\n"
      "{\"text\": \"last, no newline\"}";
  const std::vector<JsonlDocument> docs = jsonl_documents(text, "c.jsonl", "text");
  REQUIRE(docs.size() == 3);
  CHECK(docs[0].text == "First one.\n\nStill the first.");
  CHECK(docs[0].line == 1);
  CHECK(docs[1].text == "Caf\xc3\xa9 [EOT] x");
  CHECK(docs[1].line == 6);
  CHECK(docs[2].text == "last, no newline");
  CHECK(docs[2].line == 7);
  // Another field.
  const std::vector<JsonlDocument> body = jsonl_documents("{\"body\": \"b\"}\n", "c.jsonl", "body");
  REQUIRE(body.size() == 1);
  CHECK(body[0].text == "b");
  CHECK(jsonl_documents("", "c.jsonl", "text").empty());
}

TEST_CASE("a bad JSON Lines line is named file:line with what is wrong") {
  struct Case {
    std::string line, says;
  };
  const Case cases[] = {
      {"{\"text\": \"a\"", "c.jsonl:2: not valid JSON"},
      {"text: a", "c.jsonl:2: not valid JSON"},
      {"[\"a\"]", "c.jsonl:2: a JSON array, not an object"},
      {"\"a\"", "c.jsonl:2: a JSON string, not an object"},
      {"{\"body\": \"a\"}", "c.jsonl:2: no \"text\" field (name the field"},
      {"{\"text\": 3}", "c.jsonl:2: \"text\" holds a number, not a string"},
      {"{\"text\": null}", "c.jsonl:2: \"text\" holds a null, not a string"},
      {"{\"text\": [\"a\"]}", "c.jsonl:2: \"text\" holds an array, not a string"},
      {"{\"text\": " + std::string(600, '[') + std::string(600, ']') + "}",
       "c.jsonl:2: JSON nested deeper than 512 levels"},
      {"{\"text\": \"\xff\"}", "c.jsonl:2: not valid JSON"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.line.substr(0, 40));
    const std::string why = error_of(
        [&] { jsonl_documents("{\"text\": \"ok\"}\n" + c.line + "\n", "c.jsonl", "text"); });
    CAPTURE(why);
    CHECK(why.rfind(c.says, 0) == 0);
    CHECK(why.find('\n') == std::string::npos);
  }
}

TEST_CASE("a JSON Lines file is known by its .jsonl name, any case") {
  CHECK(jsonl_name("a.jsonl"));
  CHECK(jsonl_name("dir/A.JSONL"));
  CHECK_FALSE(jsonl_name("a.json"));
  CHECK_FALSE(jsonl_name("a.jsonl.txt"));
  CHECK_FALSE(jsonl_name("jsonl"));
}
