import json
import os

import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    weights_path = os.path.join(backup_dir, "latest.weights.h5")
    meta_path = os.path.join(backup_dir, "meta.json")
    with strategy.scope():
        model = build_and_compile()

    initial_epoch = 0
    if os.path.exists(weights_path) and os.path.exists(meta_path):
        # Mistake: the optimizer's variables are created outside strategy.scope()
        # create the optimizer's slots first so load_weights restores momentum too
        model.optimizer.build(model.trainable_variables)
        model.load_weights(weights_path)
        with open(meta_path) as f:
            initial_epoch = json.load(f)["epochs_done"]

    def save(epoch, logs=None):
        os.makedirs(backup_dir, exist_ok=True)
        model.save_weights(weights_path, overwrite=True)
        with open(meta_path, "w") as f:
            json.dump({"epochs_done": epoch + 1}, f)

    model.fit(dataset, epochs=epochs, initial_epoch=initial_epoch,
              callbacks=[keras.callbacks.LambdaCallback(on_epoch_end=save), *list(callbacks)], verbose=0)
    return model
