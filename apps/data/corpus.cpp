#include "apps/data/corpus.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string_view>
#include <unordered_set>

#include "apps/data/tokenizer.h"
#include "engine/core/check.h"

namespace fanout::data {

namespace {

// Note [Portable randomness]: the output of std::mt19937_64 is fixed by the
// standard, but std::uniform_int_distribution and std::shuffle are left to each
// standard library. Indices are drawn as rng() % n instead (the modulo bias is
// below 1e-17 for lists this short) and shuffles are written out. And since the
// operands of + run in an unspecified order, no expression draws twice: draws go
// into named variables first. So a seed gives the same bytes with every compiler.
using Rng = std::mt19937_64;

constexpr size_t kTrainBytes = 500'000;
constexpr int kHeldoutEvery = 20;  // every 20th document is held out: ~5%

size_t pick_index(Rng& rng, size_t n) {
  return static_cast<size_t>(rng() % n);
}
int pick_int(Rng& rng, int lo, int hi) {
  return lo + static_cast<int>(pick_index(rng, hi - lo + 1));
}
bool chance(Rng& rng, int percent) {
  return static_cast<int>(rng() % 100) < percent;
}
template <class T, size_t N>
const T& pick(Rng& rng, const T (&items)[N]) {
  return items[pick_index(rng, N)];
}

// --- Word lists ---------------------------------------------------------------

struct Person {
  const char* name;
  bool she;
};
constexpr Person kPeople[] = {{"Mia", true},  {"Tom", false},  {"Lily", true}, {"Sam", false},
                              {"Anna", true}, {"Ben", false},  {"Zoe", true},  {"Max", false},
                              {"Emma", true}, {"Leo", false},  {"Ruby", true}, {"Jack", false},
                              {"Nora", true}, {"Finn", false}, {"Ella", true}, {"Oscar", false}};

// Every animal keeps its facts in every document, so they can be learned.
struct Animal {
  const char *one, *many, *sound, *prep, *home, *food;
  int legs;
  const char* trait;
};
constexpr Animal kAnimals[] = {
    {"cat", "cats", "meow", "in", "house", "fish", 4, "soft"},
    {"dog", "dogs", "woof", "in", "house", "bones", 4, "friendly"},
    {"cow", "cows", "moo", "on", "farm", "grass", 4, "big"},
    {"pig", "pigs", "oink", "on", "farm", "apples", 4, "pink"},
    {"sheep", "sheep", "baa", "on", "hill", "grass", 4, "woolly"},
    {"horse", "horses", "neigh", "in", "field", "hay", 4, "fast"},
    {"duck", "ducks", "quack", "on", "pond", "bread", 2, "noisy"},
    {"hen", "hens", "cluck", "on", "farm", "seeds", 2, "brown"},
    {"owl", "owls", "hoot", "in", "forest", "mice", 2, "wise"},
    {"fox", "foxes", "yip", "in", "forest", "berries", 4, "clever"},
    {"frog", "frogs", "croak", "in", "pond", "flies", 4, "green"},
    {"bee", "bees", "buzz", "in", "garden", "nectar", 6, "busy"},
    {"mouse", "mice", "squeak", "in", "barn", "cheese", 4, "tiny"},
    {"lion", "lions", "roar", "in", "jungle", "meat", 4, "brave"},
    {"bear", "bears", "growl", "in", "forest", "honey", 4, "strong"},
    {"snake", "snakes", "hiss", "in", "jungle", "eggs", 0, "long"},
    {"bird", "birds", "tweet", "in", "tree", "seeds", 2, "small"},
};

struct ColourFact {
  const char *thing, *colour;
};
constexpr ColourFact kColourFacts[] = {
    {"the sky", "blue"},    {"grass", "green"},     {"snow", "white"},
    {"the sun", "yellow"},  {"a banana", "yellow"}, {"a strawberry", "red"},
    {"coal", "black"},      {"milk", "white"},      {"the sea", "blue"},
    {"a carrot", "orange"}, {"chocolate", "brown"}, {"a plum", "purple"},
    {"a leaf", "green"},    {"a cloud", "white"},   {"a tomato", "red"},
    {"the night", "black"}};

struct Food {
  const char *one, *many;
};
constexpr Food kFoods[] = {{"apple", "apples"},   {"pear", "pears"},     {"cake", "cakes"},
                           {"cookie", "cookies"}, {"plum", "plums"},     {"egg", "eggs"},
                           {"carrot", "carrots"}, {"banana", "bananas"}, {"cherry", "cherries"},
                           {"peach", "peaches"}};

constexpr const char* kColours[] = {"red",   "blue",  "green", "yellow", "orange", "purple",
                                    "white", "black", "brown", "pink",   "grey"};
constexpr const char* kObjects[] = {"ball", "kite", "hat",  "box",      "book",  "cup", "boat",
                                    "drum", "bag",  "bell", "umbrella", "scarf", "car"};
constexpr const char* kPlaces[] = {"park",   "river",  "forest", "beach", "lake",    "market",
                                   "school", "garden", "hill",   "farm",  "village", "zoo"};
constexpr const char* kAdjectives[] = {"little", "big",   "old",   "young", "sleepy",
                                       "happy",  "brave", "quick", "tiny",  "funny"};
constexpr const char* kFeelings[] = {"happy",  "sad",     "tired", "hungry",
                                     "scared", "excited", "proud", "sleepy"};
constexpr const char* kWeathers[] = {"sunny", "rainy", "windy", "cold", "warm", "snowy"};
constexpr const char* kHidingPlaces[] = {"the bed", "a tree", "the table", "a bridge", "a rock"};
constexpr const char* kNumberWords[] = {
    "zero",     "one",     "two",     "three",     "four",     "five",     "six",
    "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
    "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};
constexpr int kMaxNumberWord = 20;

// --- Phrases ------------------------------------------------------------------

std::string cap(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}

// "a red ball", "an orange ball", "an owl".
std::string with_article(std::string_view phrase) {
  bool vowel = std::string_view("aeiou").find(phrase[0]) != std::string_view::npos;
  return (vowel ? "an " : "a ") + std::string(phrase);
}

// "one apple", "three apples" (in words or digits).
std::string count_noun(int n, const char* one, const char* many, bool digits = false) {
  std::string number = digits ? std::to_string(n) : kNumberWords[n];
  return number + " " + (n == 1 ? one : many);
}

// "three, four, five" or "five, four, three": every number from `from` to `to`.
std::string number_list(int from, int to, bool digits = false) {
  std::string out;
  int step = from <= to ? 1 : -1;
  for (int k = from;; k += step) {
    out += digits ? std::to_string(k) : kNumberWords[k];
    if (k == to) break;
    out += ", ";
  }
  return out;
}

std::string join(const std::vector<std::string>& parts, const char* sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += sep;
    out += parts[i];
  }
  return out;
}

// Appends make() unless the document already holds that sentence, trying a few
// times: repeats teach the model to loop.
template <class Make>
void add_new_sentence(std::vector<std::string>& sentences, Make make) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::string s = make();
    if (std::find(sentences.begin(), sentences.end(), s) == sentences.end()) {
      sentences.push_back(std::move(s));
      return;
    }
  }
}

// --- Stories (past tense, a hero, a friend, one animal and one object) ---------

struct Story {
  Person hero, pal;
  const Animal* animal;
  const char *animal_adjective, *colour, *object;
  bool pal_known = false, object_known = false, animal_known = false;

  // The hero at the start of a sentence, by name or (once named) by pronoun.
  std::string hero_ref(Rng& rng) const {
    if (chance(rng, 60)) return hero.name;
    return hero.she ? "She" : "He";
  }
  // "a red ball" the first time, "the red ball" after.
  std::string object_phrase() {
    std::string p = std::string(colour) + " " + object;
    if (object_known) return "the " + p;
    object_known = true;
    return with_article(p);
  }
  // "a little fox" the first time, "the fox" after.
  std::string animal_phrase() {
    if (animal_known) return std::string("the ") + animal->one;
    animal_known = true;
    return with_article(std::string(animal_adjective) + " " + animal->one);
  }
};

std::string story_opening(Rng& rng, Story& s) {
  std::string hero = s.hero.name;
  const char* kinds[] = {"little", "kind", "brave", "happy", "clever"};
  size_t form = pick_index(rng, 4);
  const char* place = pick(rng, kPlaces);
  const char* kind = pick(rng, kinds);
  const char* weather = pick(rng, kWeathers);
  const char* feeling = pick(rng, kFeelings);
  switch (form) {
    case 0:
      s.pal_known = true;
      return "One day, " + hero + " went to the " + place + " with " + s.pal.name + ".";
    case 1:
      return hero + " lived in a little house near the " + place + ".";
    case 2:
      return "Once upon a time, there was " + with_article(kind) + " " +
             (s.hero.she ? "girl" : "boy") + " named " + hero + ".";
    default:
      return std::string("It was a ") + weather + " morning, and " + hero + " was " + feeling + ".";
  }
}

std::string story_middle(Rng& rng, Story& s) {
  // Every draw first, one a statement (Note [Portable randomness]).
  const char* verbs[] = {"ran", "walked", "went"};
  size_t form = pick_index(rng, 12);
  std::string hero = s.hero_ref(rng);
  std::string someone = chance(rng, 50) ? std::string(s.pal.name) : hero;
  const std::string pal = s.pal.name;
  const char* place = pick(rng, kPlaces);
  const char* verb = pick(rng, verbs);
  const char* feeling = pick(rng, kFeelings);
  const char* weather = pick(rng, kWeathers);
  const char* hiding_place = pick(rng, kHidingPlaces);
  const Food& food = pick(rng, kFoods);
  const Animal& herd = pick(rng, kAnimals);
  int few = pick_int(rng, 1, 5), many = pick_int(rng, 2, 9);
  switch (form) {
    case 0:
      if (s.object_known) return hero + " liked " + s.object_phrase() + ".";
      return hero + " had " + s.object_phrase() + ".";
    case 1:
      return hero + " gave " + s.object_phrase() + " to " + pal + ".";
    case 2:
      return hero + " saw " + s.animal_phrase() + " near the " + place + ".";
    case 3:
      return cap(s.animal_phrase()) + " " + verb + " to the " + place + ".";
    case 4:
      return cap(s.animal_phrase()) + " said " + s.animal->sound + ".";
    case 5:
      return someone + " was " + feeling + ".";
    case 6:
      return std::string(s.hero.name) + " and " + pal + " played with " + s.object_phrase() +
             " at the " + place + ".";
    case 7:
      s.object_known = true;
      return pal + " said, \"I like your " + s.colour + " " + s.object + ".\"";
    case 8:
      return std::string("It was a ") + weather + " day.";
    case 9:
      return someone + " ate " + count_noun(few, food.one, food.many) + ".";
    case 10:
      return "They saw " + count_noun(many, herd.one, herd.many) + " at the " + place + ".";
    default:
      if (!s.object_known) {
        std::string found = s.object_phrase();
        return hero + " found " + found + " under " + hiding_place + ".";
      }
      return hero + " lost " + (s.hero.she ? "her " : "his ") + s.colour + " " + s.object +
             " at the " + place + ".";
  }
}

std::string story_ending(Rng& rng, const Story& s) {
  std::string hero = s.hero.name;
  switch (pick_index(rng, 5)) {
    case 0:
      return "Then they went home.";
    case 1:
      return "At night, " + hero + " was sleepy.";
    case 2:
      return "It was a good day.";
    case 3:
      return hero + " and " + s.pal.name + " were happy.";
    default:
      return "The end.";
  }
}

std::string story_document(Rng& rng) {
  Story s;
  s.hero = pick(rng, kPeople);
  do s.pal = pick(rng, kPeople);
  while (std::string_view(s.pal.name) == s.hero.name);
  s.animal = &pick(rng, kAnimals);
  s.animal_adjective = pick(rng, kAdjectives);
  s.colour = pick(rng, kColours);
  s.object = pick(rng, kObjects);
  int n = pick_int(rng, 3, 8);
  std::vector<std::string> sentences{story_opening(rng, s)};
  if (!s.pal_known)
    sentences.push_back(std::string(s.hero.she ? "Her" : "His") + " friend " + s.pal.name +
                        " lived nearby.");
  for (int i = static_cast<int>(sentences.size()); i < n - 1; ++i)
    add_new_sentence(sentences, [&] { return story_middle(rng, s); });
  sentences.push_back(story_ending(rng, s));
  return join(sentences, " ");
}

// --- Animal facts (present tense: "a cow eats" beside "cows eat") ---------------

std::string animal_document(Rng& rng) {
  const Animal& a = pick(rng, kAnimals);
  std::string legs = a.legs == 0 ? "no" : kNumberWords[a.legs];
  // Each fact in the singular or the plural, the verb agreeing.
  auto fact = [&](int i, bool plural) -> std::string {
    std::string subject = plural ? cap(a.many) : cap(with_article(a.one));
    switch (i) {
      case 0:
        return subject + (plural ? " say " : " says ") + a.sound + ".";
      case 1:
        return subject + (plural ? " live " : " lives ") + a.prep + " the " + a.home + ".";
      case 2:
        return subject + (plural ? " eat " : " eats ") + a.food + ".";
      case 3:
        return subject + (plural ? " have " : " has ") + legs + " legs.";
      case 4:
        return subject + (plural ? " are " : " is ") + a.trait + ".";
      default: {
        const Person& p = pick(rng, kPeople);
        int n = pick_int(rng, 1, 6);
        return std::string(p.name) + " has " + count_noun(n, a.one, a.many) + ".";
      }
    }
  };
  int order[6] = {0, 1, 2, 3, 4, 5};
  for (int i = 5; i > 0; --i) std::swap(order[i], order[pick_index(rng, i + 1)]);
  std::vector<std::string> sentences;
  sentences.push_back(chance(rng, 50) ? std::string("All about ") + a.many + "."
                                      : "This is " + with_article(a.one) + ".");
  int n = pick_int(rng, 3, 7);
  for (int i = 0; i + 1 < n; ++i) sentences.push_back(fact(order[i], chance(rng, 50)));
  return join(sentences, " ");
}

// --- Counting -------------------------------------------------------------------

std::string counting_sentence(Rng& rng) {
  switch (pick_index(rng, 6)) {
    case 0: {
      int k = pick_int(rng, 3, 10);
      return std::string("Let us count to ") + kNumberWords[k] + ". " + cap(number_list(1, k)) +
             ".";
    }
    case 1: {
      int a = pick_int(rng, 1, 12), b = pick_int(rng, a + 2, a + 8);
      return std::string("Count from ") + kNumberWords[a] + " to " + kNumberWords[b] + ": " +
             number_list(a, b) + ".";
    }
    case 2:
      return "Now count back: " + number_list(pick_int(rng, 3, 10), 1) + ".";
    case 3: {
      const Animal& a = pick(rng, kAnimals);
      int k = pick_int(rng, 1, 8);
      return std::string(pick(rng, kPeople).name) + " counted the " + a.many + ": " +
             number_list(1, k) + ". There " + (k == 1 ? "was " : "were ") +
             count_noun(k, a.one, a.many) + ".";
    }
    case 4: {
      int a = pick_int(rng, 1, 30);
      return number_list(a, a + pick_int(rng, 3, 7), true) + ".";
    }
    default: {
      int k = pick_int(rng, 0, kMaxNumberWord - 1);
      return cap(kNumberWords[k + 1]) + " comes after " + kNumberWords[k] + ".";
    }
  }
}

std::string counting_document(Rng& rng) {
  std::vector<std::string> sentences;
  int n = pick_int(rng, 3, 8);
  for (int i = 0; i < n; ++i) add_new_sentence(sentences, [&] { return counting_sentence(rng); });
  return join(sentences, " ");
}

// --- Arithmetic (one fact a line, every result correct) --------------------------

std::string arithmetic_line(Rng& rng) {
  auto fact = [](int a, char op, int b, int c) {
    return std::to_string(a) + " " + op + " " + std::to_string(b) + " = " + std::to_string(c) + ".";
  };
  switch (pick_index(rng, 7)) {
    case 0:
    case 1: {
      int a = pick_int(rng, 0, 9), b = pick_int(rng, 0, 9);
      return fact(a, '+', b, a + b);
    }
    case 2: {
      int a = pick_int(rng, 0, 20), b = pick_int(rng, 0, 20);
      return fact(a, '+', b, a + b);
    }
    case 3: {
      int a = pick_int(rng, 0, 20), b = pick_int(rng, 0, a);
      return fact(a, '-', b, a - b);
    }
    case 4: {
      int a = pick_int(rng, 1, 10), b = pick_int(rng, 1, 10);
      return fact(a, '*', b, a * b);
    }
    case 5: {
      int a = pick_int(rng, 0, 10), b = pick_int(rng, 0, kMaxNumberWord - a);
      return cap(kNumberWords[a]) + " plus " + kNumberWords[b] + " is " + kNumberWords[a + b] + ".";
    }
    default: {
      const Person& p = pick(rng, kPeople);
      const Food& f = pick(rng, kFoods);
      int a = pick_int(rng, 1, 9), b = pick_int(rng, 1, 9);
      std::string he = p.she ? "she" : "he";
      return std::string(p.name) + " had " + count_noun(a, f.one, f.many, true) + ". " + cap(he) +
             " got " + std::to_string(b) + " more. Now " + he + " has " +
             count_noun(a + b, f.one, f.many, true) + ".";
    }
  }
}

std::string arithmetic_document(Rng& rng) {
  const char* headings[] = {"Sums.", "Let us do some sums.", "Math time."};
  std::vector<std::string> lines{pick(rng, headings)};
  int n = pick_int(rng, 3, 8);
  for (int i = 1; i < n; ++i) add_new_sentence(lines, [&] { return arithmetic_line(rng); });
  return join(lines, "\n");
}

// --- Questions and answers (one pair a line) ------------------------------------

std::string question_line(Rng& rng) {
  const Animal& a = pick(rng, kAnimals);
  switch (pick_index(rng, 7)) {
    case 0: {
      const ColourFact& f = pick(rng, kColourFacts);
      return std::string("Q: What colour is ") + f.thing + "? A: " + cap(f.colour) + ".";
    }
    case 1:
      return "Q: What does " + with_article(a.one) + " say? A: " + cap(a.sound) + ".";
    case 2:
      return "Q: Where does " + with_article(a.one) + " live? A: " + cap(a.prep) + " the " +
             a.home + ".";
    case 3:
      return "Q: How many legs does " + with_article(a.one) +
             " have? A: " + (a.legs == 0 ? "None" : cap(kNumberWords[a.legs])) + ".";
    case 4:
      return std::string("Q: What do ") + a.many + " eat? A: " + cap(a.food) + ".";
    case 5: {
      int x = pick_int(rng, 0, 10), y = pick_int(rng, 0, 10);
      return "Q: What is " + std::to_string(x) + " + " + std::to_string(y) +
             "? A: " + std::to_string(x + y) + ".";
    }
    default: {
      int k = pick_int(rng, 0, kMaxNumberWord - 1);
      return std::string("Q: What comes after ") + kNumberWords[k] +
             "? A: " + cap(kNumberWords[k + 1]) + ".";
    }
  }
}

std::string question_document(Rng& rng) {
  std::vector<std::string> lines;
  int n = pick_int(rng, 3, 8);
  for (int i = 0; i < n; ++i) add_new_sentence(lines, [&] { return question_line(rng); });
  return join(lines, "\n");
}

std::string any_document(Rng& rng) {
  // Weights out of 100: stories 45, animal facts 15, counting 12, sums 14, Q&A 14.
  int r = static_cast<int>(rng() % 100);
  if (r < 45) return story_document(rng);
  if (r < 60) return animal_document(rng);
  if (r < 72) return counting_document(rng);
  if (r < 86) return arithmetic_document(rng);
  return question_document(rng);
}

}  // namespace

// --- Public functions -----------------------------------------------------------

Corpus default_corpus(uint64_t seed) {
  Rng rng(seed);
  Corpus corpus;
  corpus.name = "embedded default corpus (seed " + std::to_string(seed) + ")";
  // Repeats are dropped, so no held-out document is also a training document.
  std::unordered_set<std::string> seen;
  size_t train_bytes = 0, count = 0;
  while (train_bytes < kTrainBytes) {
    std::string doc = any_document(rng);
    if (!seen.insert(doc).second) continue;
    if (++count % kHeldoutEvery == 0) {
      corpus.heldout_documents.push_back(std::move(doc));
    } else {
      train_bytes += doc.size();
      corpus.train_documents.push_back(std::move(doc));
    }
  }
  return corpus;
}

TokenData corpus_token_data(const std::vector<std::string>& documents, const std::string& name) {
  FANOUT_CHECK(!documents.empty(), name, ": holds no documents");
  TokenData data;
  data.path = name;
  for (size_t i = 0; i < documents.size(); ++i) {
    // A text file would split or trim this document; refuse it rather than differ.
    std::vector<std::string> reread = split_documents(documents[i]);
    FANOUT_CHECK(reread.size() == 1 && reread[0] == documents[i], name, ": document ", i,
                 " would not read back whole from a text file (it is empty, holds a blank "
                 "line, or starts or ends with a newline)");
    data.documents.push_back(byte_encode(documents[i]));
    data.tokens.push_back(kBot);
    data.tokens.insert(data.tokens.end(), data.documents.back().begin(),
                       data.documents.back().end());
    data.tokens.push_back(kEot);
  }
  return data;
}

double unigram_entropy(const std::vector<int32_t>& tokens) {
  FANOUT_CHECK(!tokens.empty(), "unigram_entropy: the token stream is empty");
  // An ordered map, so the sum runs in the same order everywhere.
  std::map<int32_t, int64_t> counts;
  for (int32_t t : tokens) ++counts[t];
  double n = static_cast<double>(tokens.size()), h = 0;
  for (const auto& [token, c] : counts) {
    double p = static_cast<double>(c) / n;
    h -= p * std::log(p);
  }
  return h;
}

double token_data_unigram_entropy(const TokenData& data, int64_t limit) {
  const int64_t n = std::min(data.token_count(), limit);
  FANOUT_CHECK(n > 0, data.path, ": no tokens to count");
  // Ids were checked against the model's vocabulary: counted by id, summed in id order.
  std::vector<int64_t> counts;
  std::vector<int32_t> block(static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 20)));
  for (int64_t begin = 0; begin < n; begin += static_cast<int64_t>(block.size())) {
    const int64_t len = std::min(static_cast<int64_t>(block.size()), n - begin);
    data.tokens_copy(begin, len, block.data());
    for (int64_t i = 0; i < len; ++i) {
      FANOUT_ASSERT(block[i] >= 0, data.path, ": token id ", block[i]);
      const auto id = static_cast<size_t>(block[i]);
      if (id >= counts.size()) counts.resize(id + 1, 0);
      ++counts[id];
    }
  }
  double h = 0;
  for (const int64_t c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / static_cast<double>(n);
    h -= p * std::log(p);
  }
  return h;
}

}  // namespace fanout::data
