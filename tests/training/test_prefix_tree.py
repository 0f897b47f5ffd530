"""The shared-prefix forward (training.prefix_tree) on the real tiny Llama: the tree, its
schedule, and hidden states equal to one plain transformers forward per sequence."""

import pytest
import torch

from agents.models import tiny_llama
from training.prefix_tree import TreePlan, buckets_by_length, build_tree, tree_hidden


def spelled(tree, seq):
    """The tokens along sequence `seq`'s path, each segment starting where the last ended."""
    out = []
    for s in tree.path(seq):
        assert tree.segments[s].start == len(out)
        out += tree.segments[s].tokens
    return out


def test_tree_computes_each_shared_token_once():
    inputs = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2], [1, 2, 3, 4, 6, 7], [9, 9], [1, 2, 3, 5]]
    tree = build_tree(inputs, min_shared=0)
    for i, x in enumerate(inputs):
        assert spelled(tree, i)[: len(x)] == x
    # by hand: [1 2 3] shared by five; [4 6 7] holds [1 2 3 4] and its continuation; [5] twice
    # (the same sequence); [9 9]
    assert sorted(s.tokens for s in tree.segments) == [[1, 2, 3], [4, 6, 7], [5], [9, 9]]
    assert tree.distinct_tokens() == 9 < sum(map(len, inputs))
    ends = [tree.segments[e].tokens for e in tree.ends]
    assert ends == [[4, 6, 7], [5], [1, 2, 3], [4, 6, 7], [9, 9], [5]]


def test_a_conversations_turns_are_one_segment():
    """Each turn extends the last (prompt, reply, observation): one pass over the last turn."""
    turns = [[5, 6, 7], [5, 6, 7, 8, 9], [5, 6, 7, 8, 9, 10, 11, 12]]
    tree = build_tree(turns, min_shared=0)
    assert [s.tokens for s in tree.segments] == [turns[-1]]
    assert tree.ends == [0, 0, 0]


def test_small_shared_segments_are_pushed_down_into_their_children():
    inputs = [[1, 2, 3, 4], [1, 2, 3, 5], [1, 2, 3, 6]]
    shared = build_tree(inputs, min_shared=6)  # (3 children - 1) x 3 tokens = 6 saved: kept
    assert shared.distinct_tokens() == 6
    alone = build_tree(inputs, min_shared=7)  # not worth a pass: each computes it
    assert alone.distinct_tokens() == 12 and all(s.parent == -1 for s in alone.segments)
    for tree in (shared, alone):
        for i, x in enumerate(inputs):
            assert spelled(tree, i) == x


def test_random_trees_spell_every_sequence():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        base = torch.randint(0, 3, (8,), generator=g).tolist()
        n = int(torch.randint(1, 8, (1,), generator=g))
        inputs = []
        for _ in range(n):
            cut = int(torch.randint(0, 9, (1,), generator=g))
            tail = torch.randint(0, 3, (int(torch.randint(1, 6, (1,), generator=g)),), generator=g)
            inputs.append(base[:cut] + tail.tolist())
        for min_shared in (0, 4, 100):
            tree = build_tree(inputs, min_shared)
            plan = TreePlan(tree, pad_id=-1)
            flat = torch.cat([b.input_ids.reshape(-1) for b in plan.buckets]).tolist()
            for i, x in enumerate(inputs):
                assert spelled(tree, i)[: len(x)] == x
                assert [flat[plan.index(i, k)] for k in range(len(x))] == x


def test_buckets_by_length_minimises_padding_plus_passes():
    # one batch: 3 x 100 + cost; two: 100 + 2 x 10 + 2 cost: the split pays when cost < 180
    assert buckets_by_length([100, 10, 10], bucket_cost=50) == [[0], [1, 2]]
    assert buckets_by_length([100, 10, 10], bucket_cost=200) == [[0, 1, 2]]
    assert buckets_by_length([], bucket_cost=1) == []


@pytest.fixture(scope="module")
def model():
    return tiny_llama(0, init=0.2)[0].eval()


@pytest.mark.parametrize("attention,kind", [("sdpa", "bool"), ("eager", "additive")])
def test_tree_hidden_states_equal_one_forward_per_sequence(model, attention, kind):
    """Every position's final hidden state equals a plain transformers forward of that sequence
    alone (no padding, no tree), for sequences sharing prefixes at several depths."""
    rules = list(range(300, 340))
    inputs = [
        rules + [7, 8, 9, 10],
        rules + [7, 8, 11],
        rules + [7, 8, 11, 12, 13, 14],  # a later turn of the one before
        rules + [20] * 9,
        list(range(500, 530)),  # shares nothing
        rules + [7, 8, 9, 10],  # a duplicate
    ]
    plan = TreePlan(build_tree(inputs, min_shared=0), pad_id=0, bucket_cost=0)
    assert len(plan.buckets) > 2 and plan.tree.distinct_tokens() < sum(map(len, inputs))
    before = model.config._attn_implementation
    model.config._attn_implementation = attention
    try:
        with torch.no_grad():
            flat = tree_hidden(model.get_decoder(), plan, kind).hidden
            for i, x in enumerate(inputs):
                alone = model(input_ids=torch.tensor([x]), output_hidden_states=True)
                want = alone.hidden_states[-1][0]  # final norm applied
                got = flat[[plan.index(i, k) for k in range(len(x))]]
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    finally:
        model.config._attn_implementation = before


def test_gradients_flow_through_the_shared_keys_and_values(model):
    """d(hidden of a continuation)/d(weights) includes the shared prefix's part: the same
    gradient as the plain forward of the whole sequence."""
    x = list(range(300, 320)) + [5, 6, 7]
    y = list(range(300, 320)) + [8, 9]
    plan = TreePlan(build_tree([x, y], min_shared=0), pad_id=0)
    assert len(plan.buckets) == 2  # the prefix, then both continuations
    weight = model.model.layers[0].self_attn.k_proj.weight
    flat = tree_hidden(model.get_decoder(), plan, "bool").hidden
    (tree_grad,) = torch.autograd.grad(flat[plan.index(0, len(x) - 1)].sum(), weight)
    plain = model(input_ids=torch.tensor([x]), output_hidden_states=True).hidden_states[-1]
    (plain_grad,) = torch.autograd.grad(plain[0, -1].sum(), weight)
    assert plain_grad.abs().sum() > 0
    scale = float(plain_grad.abs().max())  # fp32: the same sum in another order
    torch.testing.assert_close(tree_grad, plain_grad, rtol=1e-4, atol=1e-5 * scale)


def test_a_plan_with_nothing_of_its_own_reads_its_outer_plan(model):
    """A micro-batch whose sequences lie wholly in the trunk computes no bucket: its hidden
    states are the outer plan's."""
    x = list(range(300, 340))
    tree = build_tree([x[:20], x], min_shared=0)
    outer = TreePlan(tree, pad_id=0, segments=list(range(len(tree.segments))))
    inner = TreePlan(tree, pad_id=0, segments=[], outer=outer)
    assert inner.buckets == []
    decoder = model.get_decoder()
    with torch.no_grad():
        trunk = tree_hidden(decoder, outer, "bool", keep_kv=True)
        flat = tree_hidden(decoder, inner, "bool", outer=trunk).hidden
    assert torch.equal(flat, trunk.hidden)
    assert inner.index(0, 19) == outer.index(0, 19)
